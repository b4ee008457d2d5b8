package watchdogs

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"path/filepath"
)

// LaunchdLabel is the Label of a watchdog's launchd job, and its plist's
// name without .plist.
func LaunchdLabel(watchdog string) string { return "io.github.airlock-sandbox." + unitName(watchdog) }

// ThrottleInterval is the least time launchd leaves between two starts of
// a watchdog, so that one that keeps failing does not spin.
const ThrottleInterval = 30

// Launchd returns a plist per watchdog: launchd runs it once at load and
// every Cadence after (StartInterval), and again, no sooner than
// ThrottleInterval, when it crashed (KeepAlive: Crashed, killed by a
// signal): a watchdog that dies is started again. Not on any exit that is
// not 0: a round that reports a failed restart, a give-up or blindness
// exits 1, and run every 30 s it would spend its restart budget in a
// minute and a half, not on the Cadence its budget is set for (as the
// systemd timer runs it). The pod itself has no launchd job: `airlock
// up` needs Linux.
func (u Units) Launchd() ([]File, error) {
	if err := u.check(); err != nil {
		return nil, err
	}
	if u.LogDir == "" {
		return nil, fmt.Errorf("launchd needs a log directory for the watchdogs' output")
	}
	var files []File
	for _, name := range u.watchdogs() {
		var b bytes.Buffer
		b.WriteString(xml.Header)
		b.WriteString(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n")
		b.WriteString("<plist version=\"1.0\">\n<dict>\n")
		key := func(k string) { fmt.Fprintf(&b, "\t<key>%s</key>\n", k) }
		str := func(indent, s string) {
			b.WriteString(indent + "<string>")
			xml.EscapeText(&b, []byte(s))
			b.WriteString("</string>\n")
		}
		key("Label")
		str("\t", LaunchdLabel(name))
		key("ProgramArguments")
		b.WriteString("\t<array>\n")
		for _, a := range u.watchdogArgs(name) {
			str("\t\t", a)
		}
		b.WriteString("\t</array>\n")
		key("RunAtLoad")
		b.WriteString("\t<true/>\n")
		key("StartInterval")
		fmt.Fprintf(&b, "\t<integer>%d</integer>\n", int(Cadence.Seconds()))
		key("KeepAlive")
		b.WriteString("\t<dict>\n\t\t<key>Crashed</key>\n\t\t<true/>\n\t</dict>\n")
		key("ThrottleInterval")
		fmt.Fprintf(&b, "\t<integer>%d</integer>\n", ThrottleInterval)
		key("StandardOutPath")
		str("\t", filepath.Join(u.LogDir, unitName(name)+".log"))
		key("StandardErrorPath")
		str("\t", filepath.Join(u.LogDir, unitName(name)+".err.log"))
		b.WriteString("</dict>\n</plist>\n")
		files = append(files, File{LaunchdLabel(name) + ".plist", b.Bytes()})
	}
	return files, nil
}
