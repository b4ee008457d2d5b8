package sandbox

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// ParseUser reads "UID[:GID]" where each part is a number or a name; a uid
// alone takes its account's group, or the same number when it has none.
func ParseUser(spec string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if uid, err = strconv.Atoi(name); err != nil {
		u, lerr := user.Lookup(name)
		if lerr != nil {
			return 0, 0, fmt.Errorf("user %q: %w", spec, lerr)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	} else {
		gid = uid
	}
	if hasGroup {
		if gid, err = strconv.Atoi(group); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return 0, 0, fmt.Errorf("user %q: %w", spec, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return uid, gid, nil
}

// HostAccount names the host account that owns uid, if any: a sandbox
// running as it shares that account's files and processes.
func HostAccount(uid int) (string, bool) {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return "", false
	}
	return u.Username, true
}

// HostGroup names the host group gid is, if any: a sandbox running with it
// reads and writes what that group may (shadow's /etc/shadow, say).
func HostGroup(gid int) (string, bool) {
	g, err := user.LookupGroupId(strconv.Itoa(gid))
	if err != nil {
		return "", false
	}
	return g.Name, true
}
