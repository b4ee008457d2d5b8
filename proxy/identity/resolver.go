package identity

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// maxAncestors bounds the parent chain reported with a process: each one
// costs a few syscalls on every new connection.
const maxAncestors = 4

// Resolver finds the process behind a client connection.
type Resolver struct {
	diag       *sockDiag
	candidates Candidates
	hashes     *HashCache
}

// NewResolver queries sock_diag in the network namespace ns (the one the
// proxy's listener lives in: sock_diag only sees its own namespace; a closed
// handle means the caller's current namespace) and searches candidates for
// the owner.
func NewResolver(ns netns.NsHandle, candidates Candidates, hashes *HashCache) (*Resolver, error) {
	d, err := openSockDiag(ns)
	if err != nil {
		return nil, err
	}
	return &Resolver{diag: d, candidates: candidates, hashes: hashes}, nil
}

// Close releases the netlink socket.
func (r *Resolver) Close() { r.diag.Close() }

// Lookup attributes the connection from client to server (the proxy's
// listening address as the client dialled it) to its owning process.
func (r *Resolver) Lookup(client, server netip.AddrPort) (*Process, error) {
	sock, err := r.diag.lookup(client, server)
	if err != nil {
		return nil, unknown("sock_diag %s→%s: %v", client, server, err)
	}
	if sock.inode == 0 {
		return nil, unknown("socket %s→%s has no inode (closed)", client, server)
	}
	pids, err := r.candidates.PIDs()
	if err != nil {
		return nil, unknown("list candidate processes: %v", err)
	}
	owners := findOwners(pids, sock.inode)
	if len(owners) == 0 {
		return nil, unknown("no process among %d candidates holds socket inode %d (%s→%s)", len(pids), sock.inode, client, server)
	}
	var p *Process
	for _, pid := range owners {
		q, err := r.describe(pid)
		if err != nil {
			return nil, err
		}
		if p != nil && (p.Exe != q.Exe || p.SHA256 != q.SHA256) {
			return nil, fmt.Errorf("%w: socket inode %d is held by pid %d (%s) and pid %d (%s)", ErrAmbiguous, sock.inode, p.PID, p.Exe, q.PID, q.Exe)
		}
		if p == nil || q.PID < p.PID {
			p = q
		}
	}
	if p.UID != int(sock.uid) {
		return nil, fmt.Errorf("%w: socket uid %d but owner pid %d runs as uid %d", ErrAmbiguous, sock.uid, p.PID, p.UID)
	}
	return p, nil
}

// describe names a process and its ancestors. The start time is read before
// and after: if it changed, the pid was reused mid-lookup and nothing read
// can be trusted.
func (r *Resolver) describe(pid int) (*Process, error) {
	st, err := readStat(pid)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	exe, sum, err := r.exe(pid)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	uid, err := readUID(pid)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	if again, err := readStat(pid); err != nil || again.start != st.start {
		return nil, unknown("pid %d exited or was reused during lookup", pid)
	}
	p := &Process{PID: pid, UID: uid, Exe: exe, SHA256: sum}
	for ppid := st.ppid; ppid > 1 && len(p.Ancestors) < maxAncestors; {
		pst, err := readStat(ppid)
		if err != nil {
			break
		}
		aexe, asum, err := r.exe(ppid)
		if err != nil {
			break // a parent we may not read ends the chain, it does not fail it
		}
		p.Ancestors = append(p.Ancestors, Ancestor{PID: ppid, Exe: aexe, SHA256: asum})
		ppid = pst.ppid
	}
	return p, nil
}

func (r *Resolver) exe(pid int) (string, string, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", "", err
	}
	sum, err := r.hashes.Exe(pid)
	if err != nil {
		return "", "", err
	}
	return exe, sum, nil
}

// findOwners returns the pids whose fd table holds socket:[inode]. It reads
// the links with readlinkat on the fd directory: no per-entry path building.
func findOwners(pids []int, inode uint32) []int {
	target := []byte("socket:[" + strconv.FormatUint(uint64(inode), 10) + "]")
	buf := make([]byte, 64)
	self := os.Getpid()
	var owners []int
	for _, pid := range pids {
		// The proxy holds the server end, never the client's socket; its
		// fd table (every tunnel) is the largest there is to scan.
		if pid != self && holds(pid, target, buf) {
			owners = append(owners, pid)
		}
	}
	return owners
}

func holds(pid int, target, buf []byte) bool {
	d, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return false // exited, or a kernel thread
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false
	}
	dfd := int(d.Fd())
	for _, name := range names {
		n, err := unix.Readlinkat(dfd, name, buf)
		if err == nil && bytes.Equal(buf[:n], target) {
			return true
		}
	}
	return false
}

type procStat struct {
	ppid  int
	start uint64
}

// readStat parses /proc/<pid>/stat after the comm field, which may itself
// contain spaces and parentheses.
func readStat(pid int) (procStat, error) {
	var buf [1024]byte
	raw, err := readProc("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed stat")
	}
	f := bytes.Fields(raw[i+1:])
	if len(f) < 20 {
		return procStat{}, errors.New("short stat")
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, errors.New("malformed stat")
	}
	return procStat{ppid: ppid, start: start}, nil
}

func readUID(pid int) (int, error) {
	var buf [4096]byte
	raw, err := readProc("/proc/"+strconv.Itoa(pid)+"/status", buf[:])
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f := bytes.Fields(rest) // real, effective, saved, filesystem
			if len(f) == 4 {
				return strconv.Atoi(string(f[3]))
			}
		}
	}
	return 0, errors.New("no Uid in status")
}
