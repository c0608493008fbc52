package roles

// recentIDs remembers ids this role consumed, direct-mapped by their low bits (ids are
// uniformly random, spec §3.3). The table has already rejected a packet whose id it misses;
// recentIDs only names the reason: an id seen here was consumed (a duplicate or a replay),
// any other is unknown. An overwritten slot turns a late replay into "unknown_id" — still
// rejected, only counted under the other reason.
type recentIDs struct{ ids [1 << 16]uint64 }

func (r *recentIDs) add(id uint64)      { r.ids[id&(1<<16-1)] = id }
func (r *recentIDs) has(id uint64) bool { return id != 0 && r.ids[id&(1<<16-1)] == id }
