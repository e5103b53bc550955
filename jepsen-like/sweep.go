package campaign

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Sweep removes what campaigns left behind: the namespaces named
// vdlj-<pid>-… (killing what runs in them) and host interfaces vj<pid>-…
// whose process <pid> is gone — or every one when all is set (no campaign
// runs) — and unmounts the size-limited data dirs under their paths. It
// returns what it removed.
func Sweep(all bool) ([]string, error) {
	var removed []string
	var errs []error
	stale := func(pidStr string) bool {
		if all {
			return true
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			return false
		}
		if pid == os.Getpid() {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), NetPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if stale(pid) {
			if err := removeNamespace(e.Name()); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "netns "+e.Name())
			}
		}
	}
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		rest, ok := strings.CutPrefix(name, hostIfPrefix)
		if !ok || !strings.Contains(rest, "-") {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := strconv.Atoi(pid); err == nil && stale(pid) {
			if err := run("ip", "link", "del", name); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "link "+name)
			}
		}
	}
	for _, m := range campaignMounts() {
		if stale(m.pid) {
			if err := syscall.Unmount(m.path, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %w", m.path, err))
			} else {
				removed = append(removed, "mount "+m.path)
			}
		}
	}
	return removed, errors.Join(errs...)
}

type campaignMount struct{ path, pid string }

// campaignMounts lists the mounts of size-limited data dirs (DiskDir):
// mount points with a path element vdlj-<pid>-….
func campaignMounts() []campaignMount {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []campaignMount
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, el := range strings.Split(f[1], "/") {
			if rest, ok := strings.CutPrefix(el, NetPrefix); ok {
				pid, _, _ := strings.Cut(rest, "-")
				out = append(out, campaignMount{f[1], pid})
				break
			}
		}
	}
	return out
}

// Leftovers lists what of this process's (pid) campaigns still exists:
// namespaces, host interfaces, mounts.
func Leftovers(pid int) []string {
	var out []string
	p := fmt.Sprintf("%s%d-", NetPrefix, pid)
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), p) {
			out = append(out, "netns "+e.Name())
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	if strings.Contains(string(links), fmt.Sprintf(" %s%d-", hostIfPrefix, pid)) {
		out = append(out, "a host interface "+fmt.Sprintf("%s%d-…", hostIfPrefix, pid))
	}
	for _, m := range campaignMounts() {
		if m.pid == strconv.Itoa(pid) {
			out = append(out, "mount "+m.path)
		}
	}
	return out
}
