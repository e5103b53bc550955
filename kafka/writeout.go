package kafka

import (
	"bufio"
	"net"
)

// writeOut writes a session's output to the connection: Data in one write,
// Vec (whole frames in pieces, stored record bytes among them) with one
// writev on a plain TCP connection. Other connections (TLS, wrappers)
// would turn every piece into a write of its own (a TLS record and a
// syscall each), so the pieces go through a small buffered writer there:
// TLS copies to encrypt anyway. The pooled memory Vec aliases is released
// once written, or once the write failed.
func (c *conn) writeOut(o Output) error {
	defer releaseAll(o.Release)
	if len(o.Data) > 0 {
		if _, err := c.nc.Write(o.Data); err != nil {
			return err
		}
	}
	if len(o.Vec) == 0 {
		return nil
	}
	if tc, ok := c.nc.(*net.TCPConn); ok {
		bufs := net.Buffers(o.Vec)
		_, err := bufs.WriteTo(tc)
		return err
	}
	if c.bw == nil {
		c.bw = bufio.NewWriterSize(c.nc, 64<<10)
	}
	for _, p := range o.Vec {
		if _, err := c.bw.Write(p); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}
