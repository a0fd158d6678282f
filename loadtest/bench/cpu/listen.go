package cpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNoListener is returned when no process listens on a port.
var ErrNoListener = errors.New("no process listens on the port")

// tcpListen is the state column of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// parseListeners returns the socket inode of every listening socket of a
// /proc/net/tcp or tcp6 table, by local port.
func parseListeners(r io.Reader) (map[int][]string, error) {
	out := map[int][]string{}
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("%w: local address %q", ErrMalformed, f[1])
		}
		port, err := strconv.ParseInt(hexPort, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: port %q", ErrMalformed, hexPort)
		}
		out[int(port)] = append(out[int(port)], f[9])
	}
	return out, sc.Err()
}

// ListenerPIDs finds, for each port, the process listening on it: of the
// processes holding the socket, the one whose parent does not (a forking
// server's children may inherit it). It reads every process's open files,
// so it is called before a measured window, not within one.
func ListenerPIDs(ports []int) (map[int]int, error) { return listenerPIDs("/proc", ports) }

func listenerPIDs(proc string, ports []int) (map[int]int, error) {
	inodes := map[string]int{} // socket inode → port
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(proc, name))
		if err != nil {
			continue // no IPv6
		}
		l, err := parseListeners(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("cpu: %s: %w", name, err)
		}
		for port, ins := range l {
			if slices.Contains(ports, port) {
				for _, in := range ins {
					inodes["socket:["+in+"]"] = port
				}
			}
		}
	}
	holders := map[int][]Stat{} // port → processes holding a listening socket
	all, err := readAll(proc)
	if err != nil {
		return nil, err
	}
	for _, st := range all {
		fds, err := os.ReadDir(fmt.Sprintf("%s/%d/fd", proc, st.PID))
		if err != nil {
			continue // gone, or not ours to read
		}
		seen := map[int]bool{}
		for _, fd := range fds {
			target, err := os.Readlink(fmt.Sprintf("%s/%d/fd/%s", proc, st.PID, fd.Name()))
			if port, ok := inodes[target]; err == nil && ok && !seen[port] {
				seen[port] = true
				holders[port] = append(holders[port], st)
			}
		}
	}
	out := map[int]int{}
	var missing []string
	for _, port := range ports {
		hs := holders[port]
		for _, h := range hs {
			if !slices.ContainsFunc(hs, func(p Stat) bool { return p.PID == h.PPID }) {
				out[port] = h.PID
				break
			}
		}
		if _, ok := out[port]; !ok {
			missing = append(missing, strconv.Itoa(port))
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("cpu: %w: %s", ErrNoListener, strings.Join(missing, ", "))
	}
	return out, nil
}
