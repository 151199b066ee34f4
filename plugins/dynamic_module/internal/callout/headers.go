package callout

import (
	"regexp"
	"slices"
	"strings"
)

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
// Forwarded, as the Lua callout does: the contract's optional model header, x-request-id for
// logs, the kit's x-eppkit-* test steering headers (force an endpoint, shed) and the config's
// forward_headers (GAIE's test-epp-endpoint-selection). Nothing else of the client's request
// reaches the picker.
//
// Trace context: traceparent is the callout span's own context when the filter has one
// (an Envoy child span, see internal/envoytrace); otherwise the client's traceparent as
// received, if valid, so the picker's span still joins the client's trace. tracestate goes
// along only with a valid client traceparent (same trace).
func CalloutHeaders(cfg *Config, request [][2]string, traceparent string) [][2]string {
	out := [][2]string{
		{":method", "POST"},
		{":path", cfg.Path},
		{":authority", cfg.Authority},
	}
	out = append(out, [2]string{"content-type", "application/json"})
	clientTrace := ""
	for _, kv := range request {
		if strings.ToLower(kv[0]) == "traceparent" && ValidTraceparent(kv[1]) && clientTrace == "" {
			clientTrace = kv[1]
		}
	}
	if traceparent == "" {
		traceparent = clientTrace
	}
	if traceparent != "" {
		out = append(out, [2]string{"traceparent", traceparent})
	}
	for _, kv := range request {
		name := strings.ToLower(kv[0])
		switch {
		case name == ModelHeader, name == "x-request-id", strings.HasPrefix(name, "x-eppkit-"), slices.Contains(cfg.ForwardHeaders, name):
			out = append(out, [2]string{name, kv[1]})
		case name == "tracestate" && clientTrace != "":
			out = append(out, [2]string{name, kv[1]})
		}
	}
	return out
}

// ModelHeader is the contract's optional model hint for the picker.
const ModelHeader = "x-gateway-model-name"

// Traceparent makes a W3C traceparent from an Envoy span's ids (hex as Envoy's tracer prints
// them; shorter ids, e.g. 64-bit trace ids, are left-padded) and the flags of the client's
// traceparent (sampled "01" when there is none). Returns "" when the ids do not make a valid one.
func Traceparent(traceID, spanID, clientTraceparent string) string {
	flags := "01"
	if ValidTraceparent(clientTraceparent) {
		flags = clientTraceparent[len(clientTraceparent)-2:]
	}
	pad := func(s string, n int) string {
		s = strings.ToLower(s)
		if len(s) < n {
			s = strings.Repeat("0", n-len(s)) + s
		}
		return s
	}
	tp := "00-" + pad(traceID, 32) + "-" + pad(spanID, 16) + "-" + flags
	if !ValidTraceparent(tp) {
		return ""
	}
	return tp
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
