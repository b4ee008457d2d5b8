package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// logLevelAnnotation marks the commands that serve until stopped (proxy,
// up): their log is what they say, from info up. The other commands say
// what they have to on stdout, and log from warn up unless --log-level
// asks for more: a log line ahead of a command's own answer is noise.
const logLevelAnnotation = "airlock.log-level"

// serviceLogs is the annotation of a command that logs from info up.
var serviceLogs = map[string]string{logLevelAnnotation: "info"}

// defaultLogLevel is cmd's level when --log-level is not given.
func defaultLogLevel(cmd *cobra.Command) string {
	if lvl, ok := cmd.Annotations[logLevelAnnotation]; ok {
		return lvl
	}
	return "warn"
}

// newLogger writes text a person reads on a terminal, and JSON lines
// anywhere else (a file, a pipe, journald, CI), for tools to parse.
func newLogger(w io.Writer, lvl slog.Level) *slog.Logger {
	if isTerminal(w) {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: dropTime}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// dropTime leaves the time out of a terminal's lines: the reader is
// watching them happen.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// isTerminal reports whether x is a file open on a terminal.
func isTerminal(x any) bool {
	f, ok := x.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
