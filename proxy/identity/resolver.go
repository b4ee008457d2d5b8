package identity

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/procstat"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Resolver finds the process behind a client connection.
type Resolver struct {
	// mu is held for reading by every lookup and for writing by Close, so
	// that no lookup uses the netlink socket or the cache after Close (a
	// closed descriptor's number may already name another file).
	mu         sync.RWMutex
	closed     bool
	diag       *sockDiag
	candidates Candidates
	hashes     *HashCache
	procs      *procCache
	hook       ConnHook
	cgroups    bool // describe each process's cgroup (WithCgroups)
}

// self is the proxy's own pid: it holds the server end of every connection,
// never the client's socket.
var self = os.Getpid()

// ProcCacheSize bounds the processes whose /proc directories a resolver
// holds open: one descriptor each.
const ProcCacheSize = 512

// ConnHook knows which process connected a socket, on which descriptor
// (-1: not known) and when (time since boot), by the socket's cookie (the
// connhook package's BPF programs).
type ConnHook interface {
	Lookup(cookie uint64) (tgid, fd int, connectedAt time.Duration, ok bool)
	// ExecsOf is what the hook knows of the programs process tgid
	// executed.
	ExecsOf(tgid int) Execs
	// Blind: the hook has recorded no connect at all (the kernel does
	// not run it), so a miss says nothing.
	Blind() bool
}

// Execs is what the connect hook knows of the programs a process began to
// execute (execve, execveat), as times since boot; the zero value, nothing.
type Execs struct {
	// Recorded: the hook has a record of the process (or of a dead one
	// of its pid, whose execs began before it started). Began is when its
	// latest exec began (the system call's entry), Ended when its latest
	// one ended (done, or returned failed), and Running says that one of
	// its threads is inside one.
	Recorded     bool
	Began, Ended time.Duration
	Running      bool
	// Lost, for a process without a record: when the hook last had no
	// room to record an exec (0: never).
	Lost time.Duration
}

// HookEntries is how many connects the connect hook remembers
// (connhook.MaxEntries).
const HookEntries = 1 << 16

// WithConnHook makes lookups O(1): the owner is the process the hook saw
// connect, provided it still holds the socket. A socket without an entry
// (its LRU forgot it) is refused: the hook is attached before the
// sandbox's first process starts, so each of its connects was recorded;
// unless the hook is blind (it has recorded nothing: the kernel does not
// run it), when the lookup scans.
// The hook attributes a connection to its connector; a socket shared after
// connect(2) is not detected on this path, which a scan catches only if the
// sharing happened before the lookup.
func (r *Resolver) WithConnHook(h ConnHook) *Resolver {
	r.hook = h
	return r
}

// WithCgroups makes each description carry the process's cgroup, which a
// pod's shared listener places connections by. Other listeners never read
// it, and skip the read on each newly described process.
func (r *Resolver) WithCgroups() *Resolver {
	r.cgroups = true
	return r
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
	return &Resolver{diag: d, candidates: candidates, hashes: hashes, procs: newProcCache(ProcCacheSize)}, nil
}

// Close releases the netlink socket and the cached processes' directories,
// once the lookups under way have ended; later lookups fail.
func (r *Resolver) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	r.diag.Close()
	r.procs.purge()
}

// Lookup attributes the connection from client to server (the proxy's
// listening address as the client dialled it) to its owning process.
func (r *Resolver) Lookup(client, server netip.AddrPort) (*Process, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, unknown("the sandbox's listener is closed")
	}
	sock, err := r.diag.lookup(client, server)
	if err != nil {
		return nil, unknown("sock_diag %s→%s: %v", client, server, err)
	}
	if sock.inode == 0 {
		return nil, unknown("socket %s→%s has no inode (closed)", client, server)
	}
	if r.hook != nil {
		tgid, fd, at, ok := r.hook.Lookup(sock.cookie)
		switch {
		case !ok && !r.hook.Blind():
			// Every process of the sandbox was born under the hook, so
			// each of its connects is recorded; one missing was pushed
			// out of the hook's table (a flood of connects can do that),
			// and the scan would name whoever holds the socket now.
			return nil, unknown("the connect hook has no record of socket %s→%s (its table keeps about the latest %d connects)", client, server, HookEntries)
		case ok && tgid != self:
			return r.connector(tgid, fd, at, sock)
		}
	}
	pids, err := r.candidates.PIDs()
	if err != nil {
		return nil, unknown("list candidate processes: %v", err)
	}
	owners, err := findOwners(pids, sock.inode)
	if err != nil {
		return nil, unknown("%v", err)
	}
	if len(owners) == 0 {
		return nil, unknown("no process among %d candidates holds socket inode %d (%s→%s)", len(pids), sock.inode, client, server)
	}
	return r.owner(owners, sock)
}

// connector describes the process the connect hook saw make the
// connection, which must still hold the socket. One that does not (it
// exited, or its pid is a later process's, or it closed its copy) is no
// answer, and neither are the socket's holders then: a copy can be hidden
// from every fd table while the proxy looks (sent to a unix socket of its
// own, SCM_RIGHTS, and taken back after), so a connector that seems to
// have handed the socket on may still drive it. The check and the
// description go through one /proc directory, so both are of the same
// process. fd is where the connector connected the socket, checked first
// (-1: not known).
func (r *Resolver) connector(tgid, fd int, at time.Duration, sock diagSocket) (*Process, error) {
	p, err := r.connectorNow(tgid, fd, at, sock)
	if err != nil {
		return nil, err
	}
	// Executed another program since it connected, or was executing one
	// when it did: what it sent may be the program's before, and the one
	// described is another (connect, write, execute a program the policy
	// allows, keeping the socket; or connect and write from one thread
	// while another executes it: the exec ends the first thread, and its
	// socket goes on in the new program). Asked after the description:
	// an exec is on record, begun and running, before /proc/PID/exe
	// names the new program.
	e := r.hook.ExecsOf(tgid)
	if e.Recorded && e.Began < p.start {
		// A dead process's of the same pid, kept after it (a kernel
		// whose exit tracepoint has no group_dead): every exec of this
		// one began after it started.
		e = Execs{}
	}
	switch {
	case e.Recorded && e.Began > at:
		return nil, fmt.Errorf("%w: pid %d, which connected socket inode %d, began to execute another program %s after it connected: what it sent may be the first one's", ErrAmbiguous, tgid, sock.inode, (e.Began - at).Round(time.Microsecond))
	case e.Recorded && (e.Running || e.Ended > at):
		return nil, fmt.Errorf("%w: pid %d connected socket inode %d while it was executing another program: what it sent may be the first one's", ErrAmbiguous, tgid, sock.inode)
	case !e.Recorded && e.Lost > at:
		return nil, fmt.Errorf("%w: pid %d connected socket inode %d, and the hook's table of programs executed was full since: whether it executed another cannot be told", ErrAmbiguous, tgid, sock.inode)
	}
	return p, nil
}

// connectorNow is connector's description of the connector as it is now.
func (r *Resolver) connectorNow(tgid, fd int, at time.Duration, sock diagSocket) (*Process, error) {
	socket := heldSocket{link: socketLink(sock.inode), fd: fd}
	if p, ok := r.procs.get(tgid, at+startSlack, int(sock.uid), &socket); ok {
		return p, nil
	}
	gone := fmt.Errorf("%w: the process that connected socket inode %d (pid %d) no longer holds it; its holders now cannot be believed (a copy may be hidden while the proxy looks)", ErrAmbiguous, sock.inode, tgid)
	d, err := openProc(tgid)
	if err != nil {
		return nil, gone
	}
	defer func() {
		if d.fd >= 0 {
			d.close()
		}
	}()
	held, err := d.holds(socket)
	if err != nil {
		return nil, unknown("read the fd table of pid %d, which connected socket inode %d: %v", tgid, sock.inode, err)
	}
	if !held {
		return nil, gone
	}
	p, err := r.describeDir(&d, at+startSlack, int(sock.uid))
	if err != nil {
		return nil, err // a later process of its pid: started after the connect
	}
	if p.UID != int(sock.uid) {
		return nil, fmt.Errorf("%w: socket uid %d but pid %d, which connected it, runs as uid %d", ErrAmbiguous, sock.uid, p.PID, p.UID)
	}
	return p, nil
}

// owner describes the socket's holders, which must agree on the executable,
// each run as the uid the socket was created with, and share one cgroup
// (a pod's service is told by its cgroup: holders in two would be decided
// as whichever came first). Each is described through
// the /proc directory its fd table was read through, so a holder that
// exits and whose pid is reused in between fails the lookup rather than
// naming the newcomer.
func (r *Resolver) owner(owners []procDir, sock diagSocket) (*Process, error) {
	defer func() {
		for _, d := range owners {
			if d.fd >= 0 {
				d.close()
			}
		}
	}()
	var p *Process
	for i := range owners {
		q, err := r.describeDir(&owners[i], 0, int(sock.uid))
		if err != nil {
			return nil, err
		}
		if q.UID != int(sock.uid) {
			return nil, fmt.Errorf("%w: socket uid %d but holder pid %d runs as uid %d", ErrAmbiguous, sock.uid, q.PID, q.UID)
		}
		if p != nil && (p.Exe != q.Exe || p.SHA256 != q.SHA256) {
			return nil, fmt.Errorf("%w: socket inode %d is held by pid %d (%s) and pid %d (%s)", ErrAmbiguous, sock.inode, p.PID, p.Exe, q.PID, q.Exe)
		}
		if p != nil && p.Cgroup != q.Cgroup {
			return nil, fmt.Errorf("%w: socket inode %d is held by pid %d (cgroup %s) and pid %d (cgroup %s)", ErrAmbiguous, sock.inode, p.PID, p.Cgroup, q.PID, q.Cgroup)
		}
		if p == nil || q.PID < p.PID {
			p = q
		}
	}
	return p, nil
}

// startSlack covers the clock-tick granularity of a process start time.
const startSlack = 20 * time.Millisecond

// describe names a process, read through its own /proc/<pid> directory fd
// so that a pid reused mid-lookup fails the read instead of describing
// another process. A non-zero startedBy refuses a
// process that started later (time since boot). A process already described
// and still the same (procCache) costs two syscalls; uid is the socket's,
// which a cached description must match to be used.
func (r *Resolver) describe(pid int, startedBy time.Duration, uid int) (*Process, error) {
	if p, ok := r.procs.get(pid, startedBy, uid, nil); ok {
		return p, nil
	}
	d, err := openProc(pid)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	defer func() {
		if d.fd >= 0 {
			d.close()
		}
	}()
	return r.read(&d, startedBy, uid)
}

// describeDir is describe for a process already open as d. A cached
// description of the pid is that same process: the cache validates it
// through its own open directory, which fails once the process is gone.
func (r *Resolver) describeDir(d *procDir, startedBy time.Duration, uid int) (*Process, error) {
	if p, ok := r.procs.get(d.pid, startedBy, uid, nil); ok {
		return p, nil
	}
	return r.read(d, startedBy, uid)
}

// read describes the process open as d and caches the description, which
// then owns d (d.fd becomes -1); on error d stays the caller's to close.
func (r *Resolver) read(d *procDir, startedBy time.Duration, uid int) (*Process, error) {
	pid := d.pid
	st, err := readStat(*d)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	if startedBy != 0 && st.start > startedBy {
		return nil, unknown("pid %d started after the connection was made", pid)
	}
	exe, key, sum, err := r.exe(*d)
	if err != nil {
		return nil, unknown("pid %d: %v", pid, err)
	}
	puid, err := readUID(*d)
	if err != nil {
		return nil, unknown("pid %d exited during lookup: %v", pid, err)
	}
	p := &Process{PID: pid, UID: puid, Exe: exe, SHA256: sum, start: st.start}
	if r.cgroups {
		if p.Cgroup, err = readCgroup(*d); err != nil {
			return nil, unknown("pid %d exited during lookup: %v", pid, err)
		}
	}
	r.procs.add(*d, st.start, key, p)
	d.fd = -1
	return p, nil
}

// exe names the executable the process runs: its path, the key of the file
// behind it, and that file's digest.
func (r *Resolver) exe(d procDir) (string, fileKey, string, error) {
	key, err := exeKey(d)
	if err != nil {
		return "", key, "", err
	}
	exe, err := d.exe()
	if err != nil {
		return "", key, "", err
	}
	// The path and the key are two reads: an exec between them would pair
	// the new binary's path with the old one's digest.
	if again, err := exeKey(d); err != nil || again != key {
		return "", key, "", fmt.Errorf("pid %d ran another executable during the lookup", d.pid)
	}
	sum, err := r.hashes.Exe(d, key)
	if err != nil {
		return "", key, "", err
	}
	return exe, key, sum, nil
}

// findOwners returns the processes whose fd table holds socket:[inode],
// open as the /proc directories their tables were read through. It reads
// the links with readlinkat on the fd directory: no per-entry path building.
// A candidate whose table cannot be read (errHiddenTable) fails the
// search: it may be the holder no one else is.
func findOwners(pids []int, inode uint32) ([]procDir, error) {
	socket := socketLink(inode)
	var owners []procDir
	for _, pid := range pids {
		// The proxy holds the server end, never the client's socket; its
		// fd table (every tunnel) is the largest there is to scan.
		if pid == self {
			continue
		}
		d, err := openProc(pid)
		if err != nil {
			continue // exited
		}
		held, err := d.holds(heldSocket{link: socket, fd: -1})
		if err != nil {
			d.close()
			for _, o := range owners {
				o.close()
			}
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		if held {
			owners = append(owners, d)
		} else {
			d.close()
		}
	}
	return owners, nil
}

// errHiddenTable: a process's fd table cannot be read through its /proc
// directory, nor through any of its threads' (its main thread has exited,
// and its other threads, which share the table, go on).
var errHiddenTable = errors.New("its main thread has exited and its other threads run on: its descriptors cannot be read")

func socketLink(inode uint32) []byte {
	return []byte("socket:[" + strconv.FormatUint(uint64(inode), 10) + "]")
}

// heldSocket is a socket to find in a process's fd table: its link
// (socketLink) and the descriptor it is expected at (-1: not known).
type heldSocket struct {
	link []byte
	fd   int
}

// holds reports whether the process has the socket open: at its expected
// descriptor (one readlink), else anywhere in its fd table, whose links are
// read with readlinkat on the fd directory, newest first. A table that
// reads empty is looked at again: a process whose main thread has exited
// shows none there, while its other threads hold them all, and it is read
// through one of them (errHiddenTable when none can be).
func (p procDir) holds(socket heldSocket) (bool, error) {
	if socket.fd >= 0 {
		var buf [64]byte
		n, err := unix.Readlinkat(p.fd, "fd/"+strconv.Itoa(socket.fd), buf[:])
		if err == nil && bytes.Equal(buf[:n], socket.link) {
			return true, nil
		}
	}
	if held, entries := p.scanTable("fd", socket.link); held || entries > 0 || !p.leaderGone() {
		return held, nil
	}
	tasks, err := p.readDir("task")
	if err != nil {
		return false, nil // gone
	}
	for _, tid := range tasks {
		if tid == strconv.Itoa(p.pid) {
			continue
		}
		if held, entries := p.scanTable("task/"+tid+"/fd", socket.link); held || entries > 0 {
			return held, nil
		}
	}
	return false, errHiddenTable
}

// scanTable looks for link among the descriptors of the fd directory at
// path (below the process's directory), newest first: whether it is
// there, and how many there are.
func (p procDir) scanTable(path string, link []byte) (held bool, entries int) {
	fd, err := unix.Openat(p.fd, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, 0 // exited, or a kernel thread
	}
	d := os.NewFile(uintptr(fd), path)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false, 0
	}
	var buf [64]byte
	for i := len(names) - 1; i >= 0; i-- {
		n, err := unix.Readlinkat(fd, names[i], buf[:])
		if err == nil && bytes.Equal(buf[:n], link) {
			return true, len(names)
		}
	}
	return false, len(names)
}

// readDir lists the directory at path below the process's directory.
func (p procDir) readDir(path string) ([]string, error) {
	fd, err := unix.Openat(p.fd, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), path)
	defer d.Close()
	return d.Readdirnames(-1)
}

// leaderGone says whether the process's main thread is a zombie while
// other threads of it live.
func (p procDir) leaderGone() bool {
	buf := procBufs.Get().(*[4096]byte)
	defer procBufs.Put(buf)
	status, err := p.read("status", buf[:])
	if err != nil {
		return false // gone
	}
	state, threads := statusFields(status, "State:"), statusFields(status, "Threads:")
	return len(state) > 0 && bytes.Equal(state[0], []byte("Z")) && len(threads) > 0 && !bytes.Equal(threads[0], []byte("1"))
}

// procBufs are read buffers for /proc files: several per lookup, and the
// lookup runs on every new connection.
var procBufs = sync.Pool{New: func() any { return new([4096]byte) }}

type procStat struct {
	start time.Duration // since boot
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's start time; it is
// 100 on every Linux ABI.
const clockTicks = 100

// readStat reads /proc/<pid>/stat through d.
func readStat(d procDir) (procStat, error) {
	buf := procBufs.Get().(*[4096]byte)
	defer procBufs.Put(buf)
	raw, err := d.read("stat", buf[:])
	if err != nil {
		return procStat{}, err
	}
	_, ticks, err := procstat.Parse(raw)
	if err != nil {
		return procStat{}, fmt.Errorf("stat: %w", err)
	}
	return procStat{start: time.Duration(ticks) * time.Second / clockTicks}, nil
}

func readUID(d procDir) (int, error) {
	buf := procBufs.Get().(*[4096]byte)
	defer procBufs.Put(buf)
	raw, err := d.read("status", buf[:])
	if err != nil {
		return 0, err
	}
	if f := statusFields(raw, "Uid:"); len(f) == 4 { // real, effective, saved, filesystem
		return strconv.Atoi(string(f[3]))
	}
	return 0, errors.New("no Uid in status")
}

// statusFields are the fields of the status line key ("Uid:"); nil when
// there is none.
func statusFields(status []byte, key string) [][]byte {
	for _, line := range bytes.Split(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			return bytes.Fields(rest)
		}
	}
	return nil
}
