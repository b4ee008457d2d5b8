// Package ingress is the pod's only door in: the host reaches a service's
// port inside the pod's network namespace through a Route, and every
// request on it must carry an operator's API key.
//
// There is no unauthenticated mode. A route without keys refuses to start;
// a request without a key, or with a key the route's key file does not
// hold, is answered 401 with a JSON reason and never reaches the service.
// Keys are stored hashed (sha256: they are 256-bit random strings, so a
// fast hash is as strong as a slow one) and compared in constant time
// against every stored hash. The service never sees an operator's key: the
// key headers are removed and X-Airlock-Operator names who called. A
// client's own of those, and of the headers naming the client's address,
// are removed under every spelling a CGI-style service reads as theirs.
//
// Every request writes one CANONICAL-INGRESS audit line naming the
// operator (or "unknown"), never the key.
package ingress
