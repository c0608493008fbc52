package sim

import (
	"fmt"
	"strings"
)

// The applications' DSL programs (spec §4.2–§4.4, §4.6, D10). Each compiles with pps/dsl;
// their tests check that the plaintext model over the generated data equals a float64
// computation within the program's Tolerance.

// parkingDay reads each lot's day as a 288-round window and sums the lots slot by slot:
// combined is c_t = Σ_lots occ_{lot,t} (spec §4.4, our reading [D]). A missing lot's value
// counts as 0 (its window's identity).
const parkingDay = `(begin
  (define lot1 (window "parking/lot1/occupied" 288))
  (define lot2 (window "parking/lot2/occupied" 288))
  (define lot3 (window "parking/lot3/occupied" 288))
  (define lot4 (window "parking/lot4/occupied" 288))
  (define lot5 (window "parking/lot5/occupied" 288))
  (define lot6 (window "parking/lot6/occupied" 288))
  (define lot7 (window "parking/lot7/occupied" 288))
  (define lot8 (window "parking/lot8/occupied" 288))
  (define lot9 (window "parking/lot9/occupied" 288))
  (define lots (list lot1 lot2 lot3 lot4 lot5 lot6 lot7 lot8 lot9))
  (define add-lists
    (lambda (a b)
      (if (null? a) () (cons (+ (car a) (car b)) (add-lists (cdr a) (cdr b))))))
  (define combined (fold add-lists lots))
`

// The four statistics of the paper's Table 2.
const (
	// ParkingMean is the day's mean of the combined occupied count.
	ParkingMean = parkingDay + `  (start-building)
  (mean combined))
`
	// ParkingMaxMin is the day's maximum and minimum of the combined count, in that order.
	ParkingMaxMin = parkingDay + `  (start-building)
  (list (max combined) (min combined)))
`
	// ParkingVariance is the day's population variance of the combined count (D11).
	ParkingVariance = parkingDay + `  (start-building)
  (variance combined))
`
	// ParkingRankFree is the "rank" of free spaces: the (0-based) lots with the most and the
	// fewest free spaces over the day, from 288·capacity − Σ occupied (ParkingCapacities).
	ParkingRankFree = parkingDay + `  (define capacity-days (list 24192 17856 12960 25920 10944 20448 15840 8640 19008))
  (define free-days (lambda (caps ls) (if (null? caps) () (cons (- (car caps) (sum (car ls))) (free-days (cdr caps) (cdr ls))))))
  (start-building)
  (define free (free-days capacity-days lots))
  (list (argmax free) (argmin free)))
`
)

// IndoorSamples is the number of samples of IndoorCorrelation (the paper measures 100–500).
const IndoorSamples = 100

// IndoorCorrelation is the squared Pearson correlation (spec §4.3, erratum 2) of mote 1's
// temperature and humidity over the last IndoorSamples samples.
const IndoorCorrelation = `(begin
  (define xs (window "lab/mote1/temperature" 100))
  (define ys (window "lab/mote1/humidity" 100))
  (start-building)
  (r2 xs ys))
`

// IndoorCorrelationSource is IndoorCorrelation for any two topics and sample count.
func IndoorCorrelationSource(x, y string, samples int) string {
	return fmt.Sprintf("(begin\n  (define xs (window %q %d))\n  (define ys (window %q %d))\n  (start-building)\n  (r2 xs ys))\n", x, samples, y, samples)
}

// IndoorRegressionSource is the linear regression over the same pairs, the paper's
// comparison for the correlation's cost (Fig. 10).
func IndoorRegressionSource(x, y string, samples int) string {
	return strings.Replace(IndoorCorrelationSource(x, y, samples), "(r2 xs ys)", "(linreg xs ys)", 1)
}

// WirelessNodes is the mesh size of WirelessRegression.
const WirelessNodes = 5

// WirelessRegression fits the path-loss model over a 5-node mesh's 20 links: its outputs are
// the slope (−η/10, WirelessEtaOf) and the intercept ((RSS(d0) − nominal)/10) of the
// published RSS against the published distance (WirelessRSSTopic).
const WirelessRegression = `(begin
  (define append (lambda (a b) (if (null? a) b (cons (car a) (append (cdr a) b)))))
  (define xs (fold append (list
    (window "mesh/node1/logd" 4)
    (window "mesh/node2/logd" 4)
    (window "mesh/node3/logd" 4)
    (window "mesh/node4/logd" 4)
    (window "mesh/node5/logd" 4))))
  (define ys (fold append (list
    (window "mesh/node1/rss" 4)
    (window "mesh/node2/rss" 4)
    (window "mesh/node3/rss" 4)
    (window "mesh/node4/rss" 4)
    (window "mesh/node5/rss" 4))))
  (start-building)
  (linreg xs ys))
`

// WirelessRegressionSource is WirelessRegression for an n-node mesh (n(n−1) samples; the
// paper goes up to 25 nodes, 600 samples).
func WirelessRegressionSource(n int) string {
	var b strings.Builder
	b.WriteString("(begin\n  (define append (lambda (a b) (if (null? a) b (cons (car a) (append (cdr a) b)))))\n")
	for _, v := range []struct{ name, suffix string }{{"xs", "logd"}, {"ys", "rss"}} {
		fmt.Fprintf(&b, "  (define %s (fold append (list", v.name)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "\n    (window \"mesh/node%d/%s\" %d)", i, v.suffix, n-1)
		}
		b.WriteString(")))\n")
	}
	b.WriteString("  (start-building)\n  (linreg xs ys))\n")
	return b.String()
}

// Tolerance is the largest difference, per output, between a program's Q24.8 result and the
// same statistic computed in float64 on the same (Q24.8-quantised) inputs: the error of
// D1's truncating arithmetic, declared per function (spec §10 #2).
var Tolerance = map[string][]float64{
	ParkingMean:        {1.0 / 128},
	ParkingMaxMin:      {0, 0},
	ParkingVariance:    {0.5},
	ParkingRankFree:    {0, 0},
	IndoorCorrelation:  {0.02},
	WirelessRegression: {1.0 / 128, 1.0 / 64},
}
