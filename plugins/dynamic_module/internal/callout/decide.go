package callout

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Outcome is what the filter does with the client's request once the picker has answered.
type Outcome int

const (
	// OutcomeRoute: set the destination header and let the request continue.
	OutcomeRoute Outcome = iota
	// OutcomeReject: the picker refused (503 no endpoint, 429 shed, 400 bad body):
	// answer the client with the picker's status and an OpenAI-style body.
	OutcomeReject
	// OutcomeFailure: the picker could not be asked or answered nonsense. Fail closed
	// (502) or, with failure_mode_allow, continue to the pool.
	OutcomeFailure
)

func (o Outcome) String() string {
	switch o {
	case OutcomeRoute:
		return "route"
	case OutcomeReject:
		return "reject"
	default:
		return "failure"
	}
}

// Response is a finished callout as the filter saw it.
type Response struct {
	// Completed is false when Envoy reports a reset or an oversized answer (no HTTP response).
	Completed bool
	// FailureReason names why Completed is false.
	FailureReason string
	Headers       map[string]string // lower-case names; first value wins
	Body          []byte
}

// Decision is what Decide concluded.
type Decision struct {
	Outcome  Outcome
	Endpoint string // OutcomeRoute: canonical ip:port of the primary
	// OutcomeRoute: the primary then its fallbacks, canonical and comma-separated (the value of
	// the destination header and metadata).
	Endpoints string
	// OutcomeRoute in the disaggregated flows: the prefiller (ip:port) and the encoders
	// (comma-separated ip:port) the picker chose, for the pd-sidecar; "" when it named none.
	Prefiller string
	Encoders  string
	Scorer    string
	Reason    string
	Status    uint32 // OutcomeReject: status for the client
	Body      []byte // OutcomeReject: OpenAI-style JSON body for the client
	Detail    string // OutcomeFailure: why (logged, and in the 502 body)
}

type pickAnswer struct {
	Endpoint  string   `json:"endpoint"`
	Prefiller string   `json:"prefiller"`
	Encoders  []string `json:"encoders"`
	Scorer    string   `json:"scorer"`
	Reason    string   `json:"reason"`
}

// Request headers that pass the picker's prefiller and encoders to the pd-sidecar, as llm-d does.
const (
	PrefillerHeader = "x-prefiller-host-port"
	EncodersHeader  = "x-encoder-hosts-ports"
)

// stageEndpoints canonicalises a comma-separated endpoint list; "" when empty or any item is bad
// (a bad list is dropped rather than routed on: the sidecar then uses its own fallback).
func stageEndpoints(raw string) string {
	if strings.TrimSpace(raw) == "" {
		return ""
	}
	var out []string
	for _, item := range strings.Split(raw, ",") {
		ep, err := ParseEndpoint(item)
		if err != nil {
			return ""
		}
		out = append(out, ep)
	}
	return strings.Join(out, ",")
}

// Decide turns the picker's answer into an outcome.
//
//   - 200 with an ip:port in the destination header (or the JSON "endpoint") routes there.
//   - 4xx/5xx in JSON is the picker's own verdict (400 bad body, 429 shed, 503 no endpoint):
//     passed to the client, as the Lua callout does.
//   - Anything else — reset, timeout, Envoy's own "upstream connect error" / "no healthy
//     upstream" replies (plain text), a 200 without a usable endpoint — is a failure.
func Decide(cfg *Config, resp Response) Decision {
	if !resp.Completed {
		return Decision{Outcome: OutcomeFailure, Detail: "callout " + resp.FailureReason}
	}
	status, err := strconv.Atoi(resp.Headers[":status"])
	if err != nil {
		return Decision{Outcome: OutcomeFailure, Detail: "callout answer has no valid :status"}
	}
	if status == 200 {
		return decideOK(cfg, resp)
	}
	isJSON := strings.Contains(resp.Headers["content-type"], "application/json") ||
		(json.Valid(resp.Body) && strings.HasPrefix(strings.TrimSpace(string(resp.Body)), "{"))
	if status >= 400 && status < 600 && isJSON {
		return Decision{Outcome: OutcomeReject, Status: uint32(status), Body: asOpenAIError(status, resp.Body)}
	}
	return Decision{
		Outcome: OutcomeFailure,
		Detail:  fmt.Sprintf("callout answered %d: %s", status, snippet(resp.Body)),
	}
}

func decideOK(cfg *Config, resp Response) Decision {
	var ans pickAnswer
	_ = json.Unmarshal(resp.Body, &ans) // the header alone is enough; the JSON adds scorer/reason
	raw := resp.Headers[cfg.DestinationHeader]
	if raw == "" {
		raw = ans.Endpoint
	}
	if strings.TrimSpace(raw) == "" {
		return Decision{Outcome: OutcomeFailure, Detail: "callout answered 200 without an endpoint"}
	}
	// The GAIE protocol's list: the primary, then fallbacks tried in order. Every item must be an
	// ip:port; the ones outside allowed_endpoints are left out.
	var endpoints []string
	for _, item := range strings.Split(raw, ",") {
		ep, err := ParseEndpoint(item)
		if err != nil {
			return Decision{Outcome: OutcomeFailure, Detail: "callout answered 200 with a bad " + err.Error()}
		}
		if cfg.allowed(ep) {
			endpoints = append(endpoints, ep)
		}
	}
	if len(endpoints) == 0 {
		return Decision{Outcome: OutcomeFailure, Detail: fmt.Sprintf("callout picked %s, which is not in allowed_endpoints", strings.TrimSpace(raw))}
	}
	ep := endpoints[0]
	prefiller := resp.Headers[PrefillerHeader]
	if prefiller == "" {
		prefiller = ans.Prefiller
	}
	encoders := resp.Headers[EncodersHeader]
	if encoders == "" {
		encoders = strings.Join(ans.Encoders, ",")
	}
	if i := strings.IndexByte(prefiller, ','); i >= 0 { // one prefiller
		prefiller = prefiller[:i]
	}
	return Decision{Outcome: OutcomeRoute, Endpoint: ep, Endpoints: strings.Join(endpoints, ","), Prefiller: stageEndpoints(prefiller),
		Encoders: stageEndpoints(encoders), Scorer: ans.Scorer, Reason: ans.Reason}
}

// asOpenAIError keeps a body that already has the OpenAI {"error": {...}} shape and wraps any
// other JSON object's "message"/"detail"/"reason" into that shape.
func asOpenAIError(status int, body []byte) []byte {
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err == nil {
		if e, ok := obj["error"].(map[string]any); ok && e["message"] != nil {
			return body
		}
		for _, k := range []string{"message", "detail", "reason", "error"} {
			if s, ok := obj[k].(string); ok && s != "" {
				return ErrorBody(status, "endpoint picker: "+s, status)
			}
		}
	}
	return ErrorBody(status, "endpoint picker answered "+strconv.Itoa(status)+": "+snippet(body), status)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
