package pagecache

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident counts the pages of path's first n bytes (n > 0) in the page
// cache. Mapping the file reads nothing: mincore only looks.
func Resident(path string, n int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, errno
	}
	c := 0
	for _, v := range vec {
		c += int(v & 1)
	}
	return c, nil
}
