package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock file-system rights by ABI version.
const (
	llFSv1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llFSv2 = llFSv1 | unix.LANDLOCK_ACCESS_FS_REFER
	llFSv3 = llFSv2 | unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llFSv5 = llFSv3 | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	llRead    = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llExec    = llRead | unix.LANDLOCK_ACCESS_FS_EXECUTE
	llFileAll = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// landlockABI asks the kernel which Landlock ABI it offers (0: none).
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// landlockABI is the ABI the sandbox's rules are built for: the kernel's,
// unless c.LandlockABI pretends another (0 for none, when it is negative).
func (c *Config) landlockABI() int {
	if c.LandlockABI != 0 {
		return max(c.LandlockABI, 0)
	}
	return landlockABI()
}

// ruleset is a Landlock ruleset built while privileged (its paths are
// opened then, before the uid switch can make them unreadable) and
// enforced just before exec.
type ruleset struct {
	fd      int
	skipped []string // what best-effort mode could not enforce
}

// buildRuleset creates the ruleset for c. In hard mode a kernel that cannot
// enforce every rule asked for is an error; in best-effort mode what is
// skipped is reported.
func buildRuleset(c *Config) (*ruleset, error) {
	abi := c.landlockABI()
	// Only --net none has Landlock handle TCP connect. Landlock sees the
	// port a program asked for, before nft's redirect: in the transparent
	// network (--net proxy) a connect to any host's 443 must reach the
	// redirect, and the nft table (InstallEgress) limits the loopback
	// ports instead. A kernel without ABI 4 thus misses nothing there.
	needNet := c.Net == NetNone
	needBind := c.SharedNetwork
	// missing is what the rules promise and the kernel cannot enforce:
	// hard mode refuses to start without it. weaker is what Landlock adds
	// on newer kernels beyond the rules: said, never refused.
	var missing, weaker []string
	switch {
	case abi < 1:
		missing = append(missing, "Landlock (the kernel has no Landlock ABI): file-system and network rules")
	case needNet && abi < 4:
		missing = append(missing, fmt.Sprintf("Landlock network rules (ABI %d < 4): TCP connect limited to the connect ports %v", abi, c.ConnectPorts))
	case needBind && abi < 4:
		missing = append(missing, fmt.Sprintf("Landlock network rules (ABI %d < 4): TCP bind in the shared network limited to the ports %v", abi, c.BindPorts))
	}
	if abi >= 1 && abi < 3 {
		// Before ABI 3 truncate(2) is not a right Landlock handles: a
		// read-only file the sandbox's uid owns could be emptied.
		missing = append(missing, fmt.Sprintf("Landlock truncate rights (ABI %d < 3): read-only files kept from truncation", abi))
	}
	if abi >= 1 && abi < 5 {
		weaker = append(weaker, fmt.Sprintf("Landlock device ioctl rights (ABI %d < 5): ioctls on devices under the allowed paths", abi))
	}
	if abi >= 1 && abi < 6 {
		weaker = append(weaker, fmt.Sprintf("Landlock scoping (ABI %d < 6): signals to, and abstract unix sockets of, processes outside the sandbox", abi))
	}
	if len(missing) > 0 && c.Landlock == LandlockHard {
		return nil, fmt.Errorf("landlock: refusing to start: the kernel cannot enforce %s (use --landlock best-effort to run without it)", strings.Join(missing, "; "))
	}
	rs := &ruleset{fd: -1, skipped: append(missing, weaker...)}
	if abi < 1 {
		return rs, nil
	}
	attr := unix.LandlockRulesetAttr{Access_fs: fsRights(abi)}
	if needNet && abi >= 4 {
		// Connect is handled; bind only in a shared namespace: in the
		// sandbox's own, nothing else could be bound to a port it takes.
		attr.Access_net = unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if needBind && abi >= 4 {
		attr.Access_net |= unix.LANDLOCK_ACCESS_NET_BIND_TCP
	}
	if abi >= 6 {
		// No signals to, and no abstract unix sockets of, processes
		// outside the sandbox.
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	size := unsafe.Sizeof(attr)
	if abi < 6 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	if abi < 4 {
		size = unsafe.Offsetof(attr.Access_net)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	rs.fd = int(fd)
	add := func(paths []string, rights uint64) error {
		for _, p := range paths {
			if err := rs.addPath(p, rights&attr.Access_fs, c.UID, c.GID); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(c.RO, llRead); err != nil {
		return nil, err
	}
	if err := add(c.Exec, llExec); err != nil {
		return nil, err
	}
	if err := add(c.RW, attr.Access_fs); err != nil {
		return nil, err
	}
	if attr.Access_net&unix.LANDLOCK_ACCESS_NET_CONNECT_TCP != 0 {
		if err := rs.allowPorts(unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, c.ConnectPorts); err != nil {
			return nil, err
		}
	}
	if attr.Access_net&unix.LANDLOCK_ACCESS_NET_BIND_TCP != 0 {
		// Port 0: a port the kernel picks, as a client's bind does.
		if err := rs.allowPorts(unix.LANDLOCK_ACCESS_NET_BIND_TCP, append([]int{0}, c.BindPorts...)); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// allowPorts allows access (TCP connect or bind) to each port.
func (rs *ruleset) allowPorts(access uint64, ports []int) error {
	for _, p := range ports {
		rule := portRule{AllowedAccess: access, Port: uint64(p)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs.fd), landlockRuleNetPort, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule(port %d): %w", p, errno)
		}
	}
	return nil
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

type portRule struct {
	AllowedAccess uint64
	Port          uint64
}

func fsRights(abi int) uint64 {
	switch {
	case abi >= 5:
		return llFSv5
	case abi >= 3:
		return llFSv3
	case abi >= 2:
		return llFSv2
	}
	return llFSv1
}

// addPath opens p (O_PATH, while still privileged; through no link uid,
// of group gid, could have planted: openGiven) and allows rights beneath
// it; a file gets only the rights that apply to files.
func (rs *ruleset) addPath(p string, rights uint64, uid, gid int) error {
	fd, err := openGiven(p, uid, gid)
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("landlock path %s does not exist", p)
		}
		return fmt.Errorf("landlock: open %s: %w", p, err)
	}
	defer unix.Close(fd)
	dir, err := isDir(fd)
	if err != nil {
		return fmt.Errorf("landlock: stat %s: %w", p, err)
	}
	if !dir {
		rights &= llFileAll
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs.fd), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_add_rule(%s): %w", p, errno)
	}
	return nil
}

// isDir says whether the file open as fd is a directory. The root of a
// mount that refuses root (FUSE without allow_other, as sshfs makes)
// cannot be looked at even by root: it is taken for the directory such a
// mount almost always is, and what uses it as one (a bind on a directory,
// a Landlock rule with a directory's rights) is refused by the kernel if
// it is not.
func isDir(fd int) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	if errors.Is(err, unix.EACCES) {
		return true, nil
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, err
}

// enforce restricts the calling thread (and what it executes). It needs
// no_new_privs first.
func (rs *ruleset) enforce() error {
	if rs.fd < 0 {
		return nil
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs.fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	unix.Close(rs.fd)
	return nil
}
