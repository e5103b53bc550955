package storage

// The tail cache: the newest entries' data, so raft and tailing consumers
// read without disk IO. Only Write fills it; catch-up reads from disk never
// do, so they cannot evict the tail. Data slices are immutable (they alias
// the buffer a Write wrote, which is never reused).

// cacheEntOverhead is charged per entry besides its data.
const cacheEntOverhead = 64

type cacheEnt struct {
	data       []byte // Entry.Data exactly (tag included for user entries)
	term       uint64
	base, next int64
	typ, flags uint8
}

// payload is what a Kafka read returns: the batches without the tag.
func (e *cacheEnt) payload() []byte { return e.data[1:] }

// tailCache is a ring of the newest entries: adding one and evicting the
// oldest never copies the others (a slice cut from the front would
// reallocate and copy the live cache every time it ran out of room).
type tailCache struct {
	limit  int64
	budget *TailBudget // shared with other logs' caches; nil: limit alone
	owner  *Log        // the log whose cache this is (for the budget)
	first  uint64      // Raft index of the oldest entry
	ring   []cacheEnt  // its length is the capacity, a power of two
	head   int         // ring position of the oldest entry
	n      int         // entries held
	bytes  int64
}

func (c *tailCache) len() int { return c.n }

// at returns the k-th entry from the oldest, k < len().
func (c *tailCache) at(k int) *cacheEnt { return &c.ring[(c.head+k)&(len(c.ring)-1)] }

func (c *tailCache) add(index uint64, e cacheEnt) {
	if c.n == 0 || index != c.first+uint64(c.n) {
		c.reset()
		c.first = index
	}
	if c.n == len(c.ring) {
		// From 4 entries: an idle stream holds its first few entries for
		// good, and 64 empty slots were 3.5 KiB of every idle stream's
		// heap; a busy one doubles its way up within a few writes.
		c.resize(max(4, 2*len(c.ring)))
	}
	*c.at(c.n) = e
	c.n++
	c.charge(int64(len(e.data)) + cacheEntOverhead)
	for c.bytes > c.limit && c.n > 0 {
		c.popOldest()
	}
}

// charge counts d more bytes held, in the shared budget too, which looks
// at the cache while it holds any.
func (c *tailCache) charge(d int64) {
	was := c.bytes
	c.bytes += d
	if c.budget == nil {
		return
	}
	c.budget.used.Add(d)
	switch {
	case was == 0 && c.bytes > 0:
		c.budget.hold(c.owner)
	case was > 0 && c.bytes == 0:
		c.budget.release(c.owner)
	}
}

// shrink drops the oldest entries while the budget is above target.
func (c *tailCache) shrink(b *TailBudget, target int64) {
	for c.n > 0 && b.used.Load() > target {
		c.popOldest()
	}
}

func (c *tailCache) popOldest() {
	e := c.at(0)
	c.charge(-(int64(len(e.data)) + cacheEntOverhead))
	*e = cacheEnt{} // let the buffer go
	c.head = (c.head + 1) & (len(c.ring) - 1)
	c.n--
	c.first++
	c.fit()
}

// ringRoomMin is the ring size below which fit leaves a ring as it is.
const ringRoomMin = 64

// fit gives back the ring room the cache no longer needs: all of it when
// the cache is empty, half of it when it is at most a quarter full (so a
// ring is never shrunk and grown back by a few entries). The ring grows
// to the most entries the cache held, one slot each (48 bytes, with a
// pointer the collector follows): a stream that cached millions of small
// entries kept a ring of hundreds of MB after the budget had taken every
// entry out for other streams, outside the budget, for as long as the
// log lived.
func (c *tailCache) fit() {
	switch {
	case c.n == 0:
		c.ring, c.head = nil, 0
	case len(c.ring) > ringRoomMin && c.n <= len(c.ring)/4:
		c.resize(len(c.ring) / 2)
	}
}

// resize moves the entries to a ring of size slots (a power of two, at
// least c.n).
func (c *tailCache) resize(size int) {
	ring := make([]cacheEnt, size)
	for k := range c.n {
		ring[k] = *c.at(k)
	}
	c.ring, c.head = ring, 0
}

func (c *tailCache) reset() {
	c.charge(-c.bytes)
	c.ring, c.head, c.n = nil, 0, 0
}

// truncate drops entries >= index (a Raft conflict).
func (c *tailCache) truncate(index uint64) {
	if index <= c.first {
		c.reset()
		return
	}
	if keep := index - c.first; keep < uint64(c.n) {
		for k := int(keep); k < c.n; k++ {
			e := c.at(k)
			c.charge(-(int64(len(e.data)) + cacheEntOverhead))
			*e = cacheEnt{}
		}
		c.n = int(keep)
		c.fit()
	}
}

// dropBefore drops entries < index (retention).
func (c *tailCache) dropBefore(index uint64) {
	for c.n > 0 && c.first < index {
		c.popOldest()
	}
}

func (c *tailCache) get(i uint64) (*cacheEnt, bool) {
	if i < c.first || i-c.first >= uint64(c.n) {
		return nil, false
	}
	return c.at(int(i - c.first)), true
}

// covers reports whether every offset >= off held by the log is cached.
func (c *tailCache) covers(off int64) bool {
	return c.n > 0 && c.at(0).base <= off
}

// find returns the position of the entry holding offset off (the first
// whose next > off); len() if none.
func (c *tailCache) find(off int64) int {
	lo, hi := 0, c.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.at(m).next > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
