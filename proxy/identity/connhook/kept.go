package connhook

import (
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// tracepoints are the links of the process's tracepoint programs
// (connectFDs, execTimes), attached on first use and kept for its life:
// referenced here, as a collected link's descriptor is closed by its
// finalizer, which would detach the program.
var tracepoints struct {
	sync.Mutex
	links []link.Link
}

func keep(links ...link.Link) {
	tracepoints.Lock()
	defer tracepoints.Unlock()
	tracepoints.links = append(tracepoints.links, links...)
}

// Tracepoints is a duplicate of each of those links' descriptors, for a
// process that outlives this one to hold (sandbox.CloseAfterExit): a
// tracepoint's last close waits out RCU grace periods in the kernel as it
// detaches, and an exit closes them one after another. None until a hook
// is attached.
func Tracepoints() ([]*os.File, error) {
	tracepoints.Lock()
	defer tracepoints.Unlock()
	var files []*os.File
	for _, l := range tracepoints.links {
		f, err := dupLink(l)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// dupLink duplicates what detaches l when it closes last: the link's own
// descriptor, or (a kernel before 5.15, which attaches by the perf event's
// ioctl) the perf event's.
func dupLink(l link.Link) (*os.File, error) {
	if fl, ok := l.(interface{ FD() int }); ok {
		fd, err := unix.FcntlInt(uintptr(fl.FD()), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("connhook: duplicate a tracepoint link: %w", err)
		}
		return os.NewFile(uintptr(fd), "airlock-tracepoint"), nil
	}
	if pe, ok := l.(link.PerfEvent); ok {
		f, err := pe.PerfEvent()
		if err != nil {
			return nil, fmt.Errorf("connhook: duplicate a tracepoint's perf event: %w", err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("connhook: a %T link has no descriptor", l)
}
