package callout

import (
	"regexp"
	"strings"
)

// notForwarded are request headers the callout must not inherit from the client request:
// pseudo-headers (set per callout), hop-by-hop and framing headers (Envoy frames the
// callout itself), and Envoy's internal headers.
var notForwarded = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "te": true, "trailer": true, "upgrade": true, "expect": true,
	"proxy-connection": true, "proxy-authorization": true,
}

// traceparentRE is the W3C Trace Context version-00 form: version-traceid-parentid-flags,
// lower-case hex, with the all-zero trace and parent ids invalid.
var traceparentRE = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// ValidTraceparent reports whether v is a traceparent a W3C receiver would accept.
func ValidTraceparent(v string) bool {
	if !traceparentRE.MatchString(v) || strings.HasPrefix(v, "ff-") {
		return false
	}
	parts := strings.Split(v, "-")
	return parts[1] != strings.Repeat("0", 32) && parts[2] != strings.Repeat("0", 16)
}

// CalloutHeaders builds the callout request's headers from the client request's headers.
//
// Everything the client sent is forwarded (the picker may key on the model header, on
// x-eppkit-* steering headers, on x-request-id), except what notForwarded lists and the
// destination header. The W3C context (traceparent, tracestate) is forwarded as received
// when the traceparent is valid, so the picker's span joins the client's trace; an invalid
// traceparent is dropped together with its tracestate.
func CalloutHeaders(cfg *Config, request [][2]string) [][2]string {
	out := [][2]string{
		{":method", "POST"},
		{":path", cfg.Path},
		{":authority", cfg.Authority},
	}
	validTrace := false
	for _, kv := range request {
		if strings.ToLower(kv[0]) == "traceparent" && ValidTraceparent(kv[1]) {
			validTrace = true
		}
	}
	hasContentType := false
	for _, kv := range request {
		name := strings.ToLower(kv[0])
		switch {
		case strings.HasPrefix(name, ":"), notForwarded[name], name == cfg.DestinationHeader,
			strings.HasPrefix(name, "x-envoy-"):
			continue
		case (name == "traceparent" || name == "tracestate") && !validTrace:
			continue
		case name == "traceparent" && !ValidTraceparent(kv[1]):
			continue // a second, invalid copy
		case name == "content-type":
			hasContentType = true
		}
		out = append(out, [2]string{name, kv[1]})
	}
	if !hasContentType {
		out = append(out, [2]string{"content-type", "application/json"})
	}
	return out
}

// HeaderIndex turns the callout answer's header list into a lower-case name -> first value map.
func HeaderIndex(headers [][2]string) map[string]string {
	m := make(map[string]string, len(headers))
	for _, kv := range headers {
		name := strings.ToLower(kv[0])
		if _, seen := m[name]; !seen {
			m[name] = kv[1]
		}
	}
	return m
}
