package procs

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/stockguard/stockguard/loadtest/tally"
)

// peakRSSMB is VmHWM of a process: the most resident memory it ever had,
// in MiB.
func peakRSSMB(pid int) (float64, error) {
	v, err := ReadField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM")
	if err != nil {
		return 0, err
	}
	return KBToMB(v), nil
}

// ReadField returns the value of the first "key: value" line of a /proc file.
func ReadField(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no %s", path, key)
}

// KBToMB reads "123456 kB" as MiB, rounded to 0.1.
func KBToMB(v string) float64 {
	n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
	if err != nil {
		return 0
	}
	return tally.Round(n/1024, 1)
}
