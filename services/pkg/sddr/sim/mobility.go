package sim

import (
	"fmt"
	"time"
)

// A Mobility places devices in cells over (virtual) time: devices in the same cell at a step
// are in radio range of each other (the disk model of spec §6.2 with a cell as the disk); cell
// 0 means alone. It must be a pure function of its arguments and the seed, so that every shard
// computes the same placement without exchanging it.
type Mobility interface {
	// Classes names the device classes (energy is reported per class).
	Classes() []string
	// Class is the class index of a device.
	Class(dev int) int
	// Cell is where dev is at time t (nanoseconds from the start, a midnight); 0: alone.
	Cell(dev int, t int64) uint64
	// Clique is the friend group of dev: devices first..first+size−1 (dev included).
	Clique(dev int) (first, size int)
}

// Scenarios the command line selects.
const (
	ScenarioCity   = "city"
	ScenarioCrowd  = "crowd"
	ScenarioGroups = "groups"
)

// Cell kinds in the top byte of a cell id.
const (
	kindTransit uint64 = iota + 1
	kindMeeting
	kindVenue
	kindStadium
	kindCrowd
	kindGroup
)

func cellID(kind, a, b uint64) uint64 { return kind<<56 | (a&0xFFFFFF)<<32 | b&0xFFFFFFFF }

// mix is SplitMix64 over the seed and up to four words: the simulator's only source of
// placement and schedule randomness, so any shard can evaluate it for any device.
func mix(seed uint64, a, b, c, d uint64) uint64 {
	x := seed
	for _, v := range [4]uint64{a, b, c, d} {
		x ^= v + 0x9E3779B97F4A7C15 + x<<6 + x>>2
		x += 0x9E3779B97F4A7C15
		x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
		x = (x ^ x>>27) * 0x94D049BB133111EB
		x ^= x >> 31
	}
	return x
}

const (
	hour = int64(time.Hour)
	day  = 24 * hour
)

// Salts that separate the uses of mix.
const (
	saltClass = iota + 1
	saltMorning
	saltEvening
	saltMeeting
	saltAttend
	saltLine
	saltCar
	saltVenueTime
	saltVenue
	saltCrowd
	saltPhase
	saltJitter
	saltDetect
	saltDelay
	saltRevoke
	saltRevokeWho
	saltRevokeTime
	saltLink
	saltRand
)

// City is a synthetic city, partitioned in districts of contiguous device ids (so a shard
// of contiguous devices holds whole districts and most contacts stay inside it):
//
//   - commuters (≈55 %): alone at home, two 15-minute rides on a transit line shared with the
//     next district (cars of a few riders, reshuffled every 15 minutes), a 30-minute daily
//     team meeting (their friends are in their team), alone at work otherwise;
//   - residents (≈45 %): alone at home, 30 minutes a day at a district venue with their
//     friend group (venue changed every 15 minutes, other groups drop in);
//   - fans (every max(16, devices/256)-th device, ≤ 256 in all): a 10-minute event at 19:00 in one
//     stadium cell per 256 fans, where a fan's first inquiry finds up to 255 new devices.
//
// Alone devices are not simulated beacon by beacon (see Run).
type City struct {
	Seed         uint64
	Devices      int
	Friends      int
	DistrictSize int // default 5000
	team         int
	fanStride    int
	cars, venues int
	districts    int
}

// NewCity builds the city for a device count and friend count.
func NewCity(seed uint64, devices, friends int) *City {
	c := &City{Seed: seed, Devices: devices, Friends: friends, DistrictSize: 5000}
	c.init()
	return c
}

func (c *City) init() {
	ds := min(c.DistrictSize, c.Devices)
	c.districts = (c.Devices + c.DistrictSize - 1) / c.DistrictSize
	k := c.Friends + 1
	c.team = k * ((6 + k - 1) / k)
	c.fanStride = max(16, c.Devices/256)
	c.cars = max(1, ds*55/100/40)
	c.venues = max(1, ds*45/100/192)
}

const (
	classCommuter = iota
	classResident
	classFan
)

// Classes implements Mobility.
func (c *City) Classes() []string { return []string{"commuter", "resident", "fan"} }

// Class implements Mobility.
func (c *City) Class(dev int) int {
	if dev%c.fanStride == 0 {
		return classFan
	}
	if mix(c.Seed, saltClass, uint64(dev/c.team), 0, 0)%100 < 55 {
		return classCommuter
	}
	return classResident
}

// Clique implements Mobility: Friends+1 consecutive devices.
func (c *City) Clique(dev int) (int, int) { return clique(dev, c.Friends, c.Devices) }

func clique(dev, friends, devices int) (int, int) {
	k := friends + 1
	first := dev / k * k
	return first, min(k, devices-first)
}

func within(tod, start, length int64) bool { return tod >= start && tod < start+length }

// Cell implements Mobility.
func (c *City) Cell(dev int, t int64) uint64 {
	d := uint64(t / day)
	tod := t % day
	u := uint64(dev)
	switch c.Class(dev) {
	case classFan:
		if within(tod, 19*hour, 10*int64(time.Minute)) {
			return cellID(kindStadium, 0, uint64(dev/c.fanStride/256))
		}
	case classCommuter:
		team := uint64(dev / c.team)
		m := 7*hour + int64(mix(c.Seed, saltMorning, u, d, 0)%uint64(2*hour))
		e := 16*hour + int64(mix(c.Seed, saltEvening, u, d, 0)%uint64(3*hour))
		ride := 15 * int64(time.Minute)
		if within(tod, m, ride) || within(tod, e, ride) {
			line := (uint64(dev/c.DistrictSize) + mix(c.Seed, saltLine, u, 0, 0)%2) % uint64(c.districts)
			slot := uint64(t / int64(15*time.Minute))
			return cellID(kindTransit, line, mix(c.Seed, saltCar, u, slot, 0)%uint64(c.cars))
		}
		ms := 10*hour + int64(mix(c.Seed, saltMeeting, team, d, 0)%uint64(5*hour))
		if within(tod, ms, hour/2) && mix(c.Seed, saltAttend, u, d, 0)%10 < 9 {
			return cellID(kindMeeting, 0, team)
		}
	case classResident:
		team := uint64(dev / c.team)
		vs := 9*hour + int64(mix(c.Seed, saltVenueTime, team, d, 0)%uint64(11*hour))
		if within(tod, vs, hour/2) && mix(c.Seed, saltAttend, u, d, 0)%10 < 8 {
			slot := uint64(t / int64(15*time.Minute))
			district := uint64(dev / c.DistrictSize)
			return cellID(kindVenue, district, mix(c.Seed, saltVenue, team, slot, 0)%uint64(c.venues))
		}
	}
	return 0
}

// Crowd is the worst case of spec §5.5: every device is in a crowd cell of ≈256 (Poisson),
// reshuffled every discovery interval, so each inquiry finds up to 255 devices it has not seen.
type Crowd struct {
	Seed     uint64
	Devices  int
	Friends  int
	Interval time.Duration
}

// Classes implements Mobility.
func (c *Crowd) Classes() []string { return []string{"crowd"} }

// Class implements Mobility.
func (c *Crowd) Class(int) int { return 0 }

// Clique implements Mobility.
func (c *Crowd) Clique(dev int) (int, int) { return clique(dev, c.Friends, c.Devices) }

// Cell implements Mobility.
func (c *Crowd) Cell(dev int, t int64) uint64 {
	cells := uint64(max(1, c.Devices/256))
	return cellID(kindCrowd, 0, mix(c.Seed, saltCrowd, uint64(dev), uint64(t/int64(c.Interval)), 0)%cells)
}

// Groups keeps devices in fixed groups of Size consecutive ids for the whole run: the
// neighbourhood-size sweeps of the plots and the property tests.
type Groups struct {
	Devices int
	Friends int
	Size    int
}

// Classes implements Mobility.
func (g *Groups) Classes() []string { return []string{fmt.Sprintf("group-of-%d", g.Size)} }

// Class implements Mobility.
func (g *Groups) Class(int) int { return 0 }

// Clique implements Mobility.
func (g *Groups) Clique(dev int) (int, int) { return clique(dev, g.Friends, g.Devices) }

// Cell implements Mobility.
func (g *Groups) Cell(dev int, _ int64) uint64 {
	if g.Size < 2 {
		return 0
	}
	return cellID(kindGroup, 0, uint64(dev/g.Size))
}
