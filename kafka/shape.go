package kafka

import (
	"encoding/binary"
	"fmt"
)

// Allocation guard. kmsg allocates an array as soon as it reads its length,
// checking only that as many bytes remain; a 100 MiB produce claiming 100M
// topics would make it allocate gigabytes of structs before failing. So,
// before kmsg decodes a request, checkShape walks it — lengths, counts and
// tagged fields only, building nothing — and rejects any length that the
// bytes present do not back, and requests with more than maxElements array
// elements in total. kmsg then decodes the same bytes (the codec stays
// kmsg's; this is only a bounds check over the same grammar).

// maxElements bounds the array elements of one request (topics, partitions,
// ...). VDL topics have one partition; real clients stay far below this.
const maxElements = 1 << 17

type shapeReader struct {
	b     []byte
	flex  bool
	elems int
	bad   bool
}

func (r *shapeReader) skip(n int) {
	if r.bad || n < 0 || n > len(r.b) {
		r.fail()
		return
	}
	r.b = r.b[n:]
}

func (r *shapeReader) fail() { r.bad = true; r.b = nil }

func (r *shapeReader) i8()  { r.skip(1) }
func (r *shapeReader) i16() { r.skip(2) }
func (r *shapeReader) i32() { r.skip(4) }
func (r *shapeReader) i64() { r.skip(8) }

func (r *shapeReader) int16v() int16 {
	if r.bad || len(r.b) < 2 {
		r.fail()
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *shapeReader) int32v() int32 {
	if r.bad || len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *shapeReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// compactLen reads a compact length (uvarint of length+1); -1 is null.
func (r *shapeReader) compactLen() int {
	v := r.uvarint()
	if v > uint64(len(r.b))+1 {
		r.fail()
		return 0
	}
	return int(v) - 1
}

func (r *shapeReader) str(nullable bool) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int16v())
	}
	if n == -1 && nullable {
		return
	}
	r.skip(n)
}

func (r *shapeReader) bytes(nullable bool) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int32v())
	}
	if n == -1 && nullable {
		return
	}
	r.skip(n)
}

func (r *shapeReader) array(nullable bool, each func()) {
	var n int
	if r.flex {
		n = r.compactLen()
	} else {
		n = int(r.int32v())
	}
	if r.bad {
		return
	}
	if n == -1 && nullable {
		return
	}
	if n < 0 || n > len(r.b) {
		r.fail()
		return
	}
	if r.elems += n; r.elems > maxElements {
		r.fail()
		return
	}
	for i := 0; i < n && !r.bad; i++ {
		each()
	}
}

// tags skips a tagged-field section (flexible versions only).
func (r *shapeReader) tags() {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return
	}
	for i := uint64(0); i < n && !r.bad; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > uint64(len(r.b)) {
			r.fail()
			return
		}
		r.skip(int(size))
	}
}

func (r *shapeReader) endStruct() {
	if r.flex {
		r.tags()
	}
}

// checkShape walks a request body of a served key and version. It knows the
// versions the profiles advertise; anything else is refused.
func checkShape(key, v int16, flex bool, body []byte) error {
	r := &shapeReader{b: body, flex: flex}
	switch key {
	case keyProduce:
		if v > 9 {
			return fmt.Errorf("%w: produce v%d shape unknown", ErrBadFrame, v)
		}
		if v >= 3 {
			r.str(true)
		}
		r.i16()
		r.i32()
		r.array(false, func() {
			r.str(false)
			r.array(false, func() {
				r.i32()
				r.bytes(true)
				r.endStruct()
			})
			r.endStruct()
		})
		r.endStruct()
	case keyFetch:
		if v > 12 {
			return fmt.Errorf("%w: fetch v%d shape unknown", ErrBadFrame, v)
		}
		r.i32() // replica id
		r.i32() // max wait
		r.i32() // min bytes
		if v >= 3 {
			r.i32()
		}
		if v >= 4 {
			r.i8()
		}
		if v >= 7 {
			r.i32()
			r.i32()
		}
		r.array(false, func() {
			r.str(false)
			r.array(false, func() {
				r.i32()
				if v >= 9 {
					r.i32()
				}
				r.i64()
				if v >= 12 {
					r.i32()
				}
				if v >= 5 {
					r.i64()
				}
				r.i32()
				r.endStruct()
			})
			r.endStruct()
		})
		if v >= 7 {
			r.array(false, func() {
				r.str(false)
				r.array(false, r.i32)
				r.endStruct()
			})
		}
		if v >= 11 {
			r.str(false)
		}
		r.endStruct()
	case keyListOffsets:
		if v > 6 {
			return fmt.Errorf("%w: list offsets v%d shape unknown", ErrBadFrame, v)
		}
		r.i32()
		if v >= 2 {
			r.i8()
		}
		r.array(false, func() {
			r.str(false)
			r.array(false, func() {
				r.i32()
				if v >= 4 {
					r.i32()
				}
				r.i64()
				if v == 0 {
					r.i32()
				}
				r.endStruct()
			})
			r.endStruct()
		})
		r.endStruct()
	case keyMetadata:
		if v > 9 {
			return fmt.Errorf("%w: metadata v%d shape unknown", ErrBadFrame, v)
		}
		r.array(v >= 1, func() {
			r.str(false)
			r.endStruct()
		})
		if v >= 4 {
			r.i8()
		}
		if v >= 8 {
			r.i8()
			r.i8()
		}
		r.endStruct()
	case keyApiVersions:
		if v > 3 {
			return fmt.Errorf("%w: api versions v%d shape unknown", ErrBadFrame, v)
		}
		if v >= 3 {
			r.str(false)
			r.str(false)
		}
		r.endStruct()
	case keyFindCoordinator:
		if v > 3 {
			return fmt.Errorf("%w: find coordinator v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false)
		if v >= 1 {
			r.i8()
		}
		r.endStruct()
	case keyJoinGroup:
		if v > 4 {
			return fmt.Errorf("%w: join group v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false) // group
		r.i32()      // session timeout
		if v >= 1 {
			r.i32() // rebalance timeout
		}
		r.str(false) // member id
		r.str(false) // protocol type
		r.array(false, func() {
			r.str(false)
			r.bytes(false)
			r.endStruct()
		})
		r.endStruct()
	case keySyncGroup:
		if v > 2 {
			return fmt.Errorf("%w: sync group v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false)
		r.i32()
		r.str(false)
		r.array(false, func() {
			r.str(false)
			r.bytes(false)
			r.endStruct()
		})
		r.endStruct()
	case keyHeartbeat:
		if v > 2 {
			return fmt.Errorf("%w: heartbeat v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false)
		r.i32()
		r.str(false)
		r.endStruct()
	case keyLeaveGroup:
		if v > 2 {
			return fmt.Errorf("%w: leave group v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false)
		r.str(false)
		r.endStruct()
	case keyOffsetCommit:
		if v > 6 {
			return fmt.Errorf("%w: offset commit v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false) // group
		if v >= 1 {
			r.i32()      // generation
			r.str(false) // member id
		}
		if v >= 2 && v <= 4 {
			r.i64() // retention time
		}
		r.array(false, func() {
			r.str(false)
			r.array(false, func() {
				r.i32() // partition
				r.i64() // offset
				if v == 1 {
					r.i64() // timestamp
				}
				if v >= 6 {
					r.i32() // leader epoch
				}
				r.str(true) // metadata
				r.endStruct()
			})
			r.endStruct()
		})
		r.endStruct()
	case keyOffsetFetch:
		if v > 6 {
			return fmt.Errorf("%w: offset fetch v%d shape unknown", ErrBadFrame, v)
		}
		r.str(false)
		r.array(v >= 2, func() {
			r.str(false)
			r.array(false, r.i32)
			r.endStruct()
		})
		r.endStruct()
	case keyDescribeGroups:
		if v > 3 {
			return fmt.Errorf("%w: describe groups v%d shape unknown", ErrBadFrame, v)
		}
		r.array(false, func() { r.str(false) })
		if v >= 3 {
			r.i8()
		}
		r.endStruct()
	case keyListGroups:
		if v > 3 {
			return fmt.Errorf("%w: list groups v%d shape unknown", ErrBadFrame, v)
		}
		r.endStruct()
	default:
		return fmt.Errorf("%w: no shape for key %d", ErrBadFrame, key)
	}
	if r.bad {
		return fmt.Errorf("%w: key %d v%d: a length or count overruns the request (or more than %d elements)", ErrBadFrame, key, v, maxElements)
	}
	return nil
}
