package policies_test

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// tarball writes a .tar.gz bundle of files, in order, under the names given.
func tarball(t *testing.T, files [][2]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, file := range files {
		if err := tw.WriteHeader(&tar.Header{Name: file[0], Mode: 0o644, Size: int64(len(file[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(file[1]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every file of a bundle is the one its hash covers and the one parsed:
// two entries of one path (only the later would be parsed, both hashed),
// an entry with a .. segment (which tar will not extract, so a reviewer
// reads another bundle), and a manifest that would parse the hashed files
// as another Rego version (it is not hashed) are refused.
func TestBundleFilesAreThoseHashed(t *testing.T) {
	const strict = "package airlock.presets.rv\n\nimport data.airlock.lib\n\nrules := []\n\ndenies := []\n\ndecision := lib.decide(rules, denies)\n"
	dir := t.TempDir()
	withManifest := func(manifest string) string {
		d := filepath.Join(dir, strings.NewReplacer("{", "", "}", "", `"`, "", ":", "-").Replace(manifest))
		writeBundle(t, d, map[string]string{"rv.rego": strict, ".manifest": manifest})
		return d
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a .. entry", tarball(t, [][2]string{{"rv.rego", strict}, {"./x/../rv.rego", strict}}), `"./x/../rv.rego": a path with a .. segment`},
		{"one path twice", tarball(t, [][2]string{{"rv.rego", strict}, {"./rv.rego", strict}}), "two files are rv.rego"},
		{"a manifest's Rego v0", withManifest(`{"rego_version":0}`), "rego_version 0"},
		{"a file's Rego v0", withManifest(`{"file_rego_versions":{"/rv.rego":0}}`), `file_rego_versions["/rv.rego"] 0`},
		{"Rego v1", withManifest(`{"rego_version":1}`), ""},
		{"one file once", tarball(t, [][2]string{{"rv.rego", strict}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policies.ReadBundle(policies.Source{Path: tc.path})
			if tc.want == "" && err != nil {
				t.Fatalf("ReadBundle = %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("ReadBundle = %v; want an error saying %q", err, tc.want)
			}
		})
	}
}
