package manifest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// FieldError is one problem in a manifest: where it is and what is wrong.
type FieldError struct {
	File string
	Line int    // 1-based; 0 when the problem has no place (an empty file)
	Path string // the field, e.g. services[1].health.interval; empty for the document
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// report collects a manifest's errors, remembers the line of every field
// it saw, and which fields already have an error, so that a later check
// does not report a field the decoder could not read a second time.
type report struct {
	file  string
	errs  []*FieldError
	lines map[string]int  // field path → line of its value
	bad   map[string]bool // field paths the decoder could not read
}

func newReport(file string) *report {
	return &report{file: file, lines: map[string]int{}, bad: map[string]bool{}}
}

// errorf reports a problem the decoder found at a known line; the field's
// value is then a placeholder, which the checks leave alone.
func (r *report) errorf(line int, path, format string, args ...any) {
	r.add(line, path, format, args...)
	r.bad[path] = true
}

func (r *report) add(line int, path, format string, args ...any) {
	r.errs = append(r.errs, &FieldError{File: r.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// at reports a problem found after decoding, at the line of the field or,
// for a default value that has no line, of its nearest written ancestor.
// A field the decoder could not read, or whose ancestor it could not, is
// not reported again: its value is a placeholder.
func (r *report) at(path, format string, args ...any) {
	if r.failed(path) {
		return
	}
	line := 0
	for p := path; ; p = parent(p) {
		if l, ok := r.lines[p]; ok {
			line = l
			break
		}
		if p == "" {
			break
		}
	}
	r.add(line, path, format, args...)
}

// failed says whether the decoder could not read path or one of its
// ancestors.
func (r *report) failed(path string) bool {
	for p := path; ; p = parent(p) {
		if r.bad[p] {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// given says whether the manifest wrote the field (rather than leaving
// it to its default).
func (r *report) given(path string) bool {
	_, ok := r.lines[path]
	return ok
}

// err is every error, in the order of the file.
func (r *report) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(r.errs, func(a, b *FieldError) int { return cmp.Compare(a.Line, b.Line) })
	errs := make([]error, len(r.errs))
	for i, e := range r.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// parent is the path of the field that holds path: services[1].health →
// services[1] → services → "".
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// field is the path of a named field under path.
func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index is the path of a list element under path.
func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
