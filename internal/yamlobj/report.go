package yamlobj

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

// Report collects a manifest's errors, remembers the line of every field
// it saw, and which fields already have an error, so that a later check
// does not report a field the decoder could not read a second time.
type Report struct {
	file  string
	errs  []*FieldError
	Lines map[string]int  // field path → line of its value
	bad   map[string]bool // field paths the decoder could not read
}

// NewReport is an empty report whose errors name file.
func NewReport(file string) *Report {
	return &Report{file: file, Lines: map[string]int{}, bad: map[string]bool{}}
}

// Errorf reports a problem the decoder found at a known line; the field's
// value is then a placeholder, which the checks leave alone.
func (r *Report) Errorf(line int, path, format string, args ...any) {
	r.add(line, path, format, args...)
	r.bad[path] = true
}

func (r *Report) add(line int, path, format string, args ...any) {
	r.errs = append(r.errs, &FieldError{File: r.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// At reports a problem found after decoding, at the line of the field or,
// for a default value that has no line, of its nearest written ancestor.
// A field the decoder could not read, or whose ancestor it could not, is
// not reported again: its value is a placeholder.
func (r *Report) At(path, format string, args ...any) {
	if r.Failed(path) {
		return
	}
	line := 0
	for p := path; ; p = Parent(p) {
		if l, ok := r.Lines[p]; ok {
			line = l
			break
		}
		if p == "" {
			break
		}
	}
	r.add(line, path, format, args...)
}

// Failed says whether the decoder could not read path or one of its
// ancestors.
func (r *Report) Failed(path string) bool {
	for p := path; ; p = Parent(p) {
		if r.bad[p] {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// Given says whether the manifest wrote the field (rather than leaving
// it to its default).
func (r *Report) Given(path string) bool {
	_, ok := r.Lines[path]
	return ok
}

// Err is every error, in the order of the file.
func (r *Report) Err() error {
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

// Parent is the path of the field that holds path: services[1].health →
// services[1] → services → "".
func Parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// Field is the path of a named field under path.
func Field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Index is the path of a list element under path.
func Index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
