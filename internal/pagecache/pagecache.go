// Package pagecache tells which pages of a file the OS holds in its page
// cache (mincore on a mapping of the file), for the tests and benchmarks
// that check what VDL's reads and writes leave there.
package pagecache
