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

type tailCache struct {
	limit int64
	first uint64 // Raft index of ents[0]
	ents  []cacheEnt
	bytes int64
}

func (c *tailCache) add(index uint64, e cacheEnt) {
	if len(c.ents) == 0 || index != c.first+uint64(len(c.ents)) {
		c.reset()
		c.first = index
	}
	c.ents = append(c.ents, e)
	c.bytes += int64(len(e.data)) + cacheEntOverhead
	for c.bytes > c.limit && len(c.ents) > 0 {
		c.bytes -= int64(len(c.ents[0].data)) + cacheEntOverhead
		c.ents[0] = cacheEnt{} // let the buffer go
		c.ents = c.ents[1:]
		c.first++
	}
}

func (c *tailCache) reset() {
	c.ents, c.bytes = nil, 0
}

// truncate drops entries >= index (a Raft conflict).
func (c *tailCache) truncate(index uint64) {
	if index <= c.first {
		c.reset()
		return
	}
	if n := index - c.first; n < uint64(len(c.ents)) {
		for i := n; i < uint64(len(c.ents)); i++ {
			c.bytes -= int64(len(c.ents[i].data)) + cacheEntOverhead
			c.ents[i] = cacheEnt{}
		}
		c.ents = c.ents[:n]
	}
}

// dropBefore drops entries < index (retention).
func (c *tailCache) dropBefore(index uint64) {
	for len(c.ents) > 0 && c.first < index {
		c.bytes -= int64(len(c.ents[0].data)) + cacheEntOverhead
		c.ents[0] = cacheEnt{}
		c.ents = c.ents[1:]
		c.first++
	}
}

func (c *tailCache) get(i uint64) (*cacheEnt, bool) {
	if i < c.first || i-c.first >= uint64(len(c.ents)) {
		return nil, false
	}
	return &c.ents[i-c.first], true
}

// covers reports whether every offset >= off held by the log is cached.
func (c *tailCache) covers(off int64) bool {
	return len(c.ents) > 0 && c.ents[0].base <= off
}

// find returns the position of the entry holding offset off (the first
// whose next > off); len(ents) if none.
func (c *tailCache) find(off int64) int {
	lo, hi := 0, len(c.ents)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.ents[m].next > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}
