package main

import (
	"crypto/x509"
	"fmt"
	"os"
)

func pool(file string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s: no certificates", file)
	}
	return p, nil
}
