package callout

import (
	"encoding/json"
	"strings"
	"testing"
)

func answer(status string, body string, headers ...string) Response {
	h := map[string]string{":status": status}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return Response{Completed: true, Headers: h, Body: []byte(body)}
}

func TestDecide(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	restricted, _ := ParseConfig([]byte(`{"cluster": "callout", "allowed_endpoints": ["127.0.0.1:8001"]}`))
	const dest = "x-gateway-destination-endpoint"
	for _, tt := range []struct {
		name       string
		cfg        *Config
		resp       Response
		want       Outcome
		wantEP     string // OutcomeRoute
		wantEPs    string // OutcomeRoute: the whole list (default: wantEP alone)
		wantStatus uint32 // OutcomeReject
		wantInText string // in Detail (failure) or Body (reject)
	}{
		{name: "header and JSON agree", resp: answer("200", `{"endpoint":"127.0.0.1:8001","scorer":"kv","reason":"hit"}`, dest, "127.0.0.1:8001"),
			want: OutcomeRoute, wantEP: "127.0.0.1:8001"},
		{name: "header wins over JSON", resp: answer("200", `{"endpoint":"127.0.0.1:9"}`, dest, "127.0.0.1:8002"),
			want: OutcomeRoute, wantEP: "127.0.0.1:8002"},
		{name: "JSON endpoint alone is enough", resp: answer("200", `{"endpoint":"127.0.0.1:8003"}`),
			want: OutcomeRoute, wantEP: "127.0.0.1:8003"},
		{name: "fallback list: the primary first, the list kept in order", resp: answer("200", `{}`, dest, "127.0.0.1:8004, 127.0.0.1:8005"),
			want: OutcomeRoute, wantEP: "127.0.0.1:8004", wantEPs: "127.0.0.1:8004,127.0.0.1:8005"},
		{name: "fallback list with a bad item", resp: answer("200", `{}`, dest, "127.0.0.1:8004,vllm-1:8000"),
			want: OutcomeFailure, wantInText: "not an IP address"},
		{name: "fallbacks outside allowed_endpoints are left out", cfg: restricted, resp: answer("200", `{}`, dest, "127.0.0.1:9999,127.0.0.1:8001"),
			want: OutcomeRoute, wantEP: "127.0.0.1:8001"},
		{name: "200 without endpoint", resp: answer("200", `{"scorer":"kv"}`),
			want: OutcomeFailure, wantInText: "without an endpoint"},
		{name: "200 with a host name", resp: answer("200", `{}`, dest, "vllm-0:8000"),
			want: OutcomeFailure, wantInText: "not an IP address"},
		{name: "pick outside allowed_endpoints", cfg: restricted, resp: answer("200", `{}`, dest, "127.0.0.1:9999"),
			want: OutcomeFailure, wantInText: "not in allowed_endpoints"},
		{name: "pick inside allowed_endpoints", cfg: restricted, resp: answer("200", `{}`, dest, "127.0.0.1:8001"),
			want: OutcomeRoute, wantEP: "127.0.0.1:8001"},
		{name: "503 no endpoint passes through", resp: answer("503", `{"error":{"message":"no endpoint","type":"ServiceUnavailableError","param":null,"code":503}}`),
			want: OutcomeReject, wantStatus: 503, wantInText: "no endpoint"},
		{name: "429 shed passes through", resp: answer("429", `{"error":{"message":"shed","type":"RateLimitError","param":null,"code":429}}`),
			want: OutcomeReject, wantStatus: 429, wantInText: "shed"},
		{name: "400 bad body passes through", resp: answer("400", `{"error":{"message":"not a JSON object"}}`),
			want: OutcomeReject, wantStatus: 400, wantInText: "not a JSON object"},
		{name: "non-OpenAI JSON refusal is wrapped", resp: answer("503", `{"detail":"pool empty"}`),
			want: OutcomeReject, wantStatus: 503, wantInText: "endpoint picker: pool empty"},
		{name: "Envoy's own connect-error reply is a failure, not a refusal",
			resp: answer("503", `upstream connect error or disconnect/reset before headers. reset reason: remote connection failure`),
			want: OutcomeFailure, wantInText: "callout answered 503: upstream connect error"},
		{name: "Envoy's timeout reply", resp: answer("504", `upstream request timeout`),
			want: OutcomeFailure, wantInText: "504"},
		{name: "any JSON 5xx is the picker's own verdict", resp: answer("500", `{"error":{"message":"boom"}}`),
			want: OutcomeReject, wantStatus: 500, wantInText: "boom"},
		{name: "JSON content type counts even for an odd body", resp: answer("503", `"pool empty"`, "content-type", "application/json"),
			want: OutcomeReject, wantStatus: 503, wantInText: "pool empty"},
		{name: "reset", resp: Response{Completed: false, FailureReason: "was reset"},
			want: OutcomeFailure, wantInText: "callout was reset"},
		{name: "no :status", resp: Response{Completed: true, Headers: map[string]string{}},
			want: OutcomeFailure, wantInText: ":status"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			if c == nil {
				c = cfg
			}
			d := Decide(c, tt.resp)
			if d.Outcome != tt.want {
				t.Fatalf("outcome = %v (%+v), want %v", d.Outcome, d, tt.want)
			}
			switch d.Outcome {
			case OutcomeRoute:
				if d.Endpoint != tt.wantEP {
					t.Errorf("endpoint = %q, want %q", d.Endpoint, tt.wantEP)
				}
				wantEPs := tt.wantEPs
				if wantEPs == "" {
					wantEPs = tt.wantEP
				}
				if d.Endpoints != wantEPs {
					t.Errorf("endpoints = %q, want %q", d.Endpoints, wantEPs)
				}
			case OutcomeReject:
				if d.Status != tt.wantStatus {
					t.Errorf("status = %d, want %d", d.Status, tt.wantStatus)
				}
				var body struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(d.Body, &body); err != nil || body.Error.Message == "" {
					t.Errorf("reject body is not OpenAI-style: %s (%v)", d.Body, err)
				}
				if !strings.Contains(string(d.Body), tt.wantInText) {
					t.Errorf("body %s does not contain %q", d.Body, tt.wantInText)
				}
			case OutcomeFailure:
				if !strings.Contains(d.Detail, tt.wantInText) {
					t.Errorf("detail %q does not contain %q", d.Detail, tt.wantInText)
				}
			}
		})
	}
}

func TestDecide_keepsScorerAndReason(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	d := Decide(cfg, answer("200", `{"endpoint":"127.0.0.1:8001","scorer":"prefix","reason":"cache hit"}`))
	if d.Scorer != "prefix" || d.Reason != "cache hit" {
		t.Errorf("got %+v", d)
	}
}

func TestDecide_prefillerAndEncodersForTheSidecar(t *testing.T) {
	cfg, _ := ParseConfig([]byte(`{"cluster": "callout"}`))
	const dest = "x-gateway-destination-endpoint"
	for _, tt := range []struct {
		name                   string
		resp                   Response
		wantPrefill, wantEncod string
	}{
		{name: "from the answer's headers",
			resp:        answer("200", `{}`, dest, "127.0.0.1:8001", PrefillerHeader, "127.0.0.1:9001", EncodersHeader, "127.0.0.1:7001, 127.0.0.1:7002"),
			wantPrefill: "127.0.0.1:9001", wantEncod: "127.0.0.1:7001,127.0.0.1:7002"},
		{name: "from the JSON fields",
			resp:        answer("200", `{"endpoint":"127.0.0.1:8001","prefiller":"127.0.0.1:9002","encoders":["127.0.0.1:7003"]}`),
			wantPrefill: "127.0.0.1:9002", wantEncod: "127.0.0.1:7003"},
		{name: "headers win over JSON",
			resp:        answer("200", `{"endpoint":"127.0.0.1:8001","prefiller":"127.0.0.1:1"}`, PrefillerHeader, "127.0.0.1:9003"),
			wantPrefill: "127.0.0.1:9003"},
		{name: "none named (aggregated flow)", resp: answer("200", `{"endpoint":"127.0.0.1:8001"}`)},
		{name: "a bad list is dropped, the route stands",
			resp:        answer("200", `{"endpoint":"127.0.0.1:8001"}`, PrefillerHeader, "prefill-0:8000", EncodersHeader, "127.0.0.1:7001,oops"),
			wantPrefill: "", wantEncod: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(cfg, tt.resp)
			if d.Outcome != OutcomeRoute || d.Endpoint != "127.0.0.1:8001" {
				t.Fatalf("got %+v, want a route to 127.0.0.1:8001", d)
			}
			if d.Prefiller != tt.wantPrefill || d.Encoders != tt.wantEncod {
				t.Errorf("prefiller %q encoders %q, want %q %q", d.Prefiller, d.Encoders, tt.wantPrefill, tt.wantEncod)
			}
		})
	}
}

func TestErrorBody_matchesServicesShape(t *testing.T) {
	var got map[string]map[string]any
	if err := json.Unmarshal(ErrorBody(502, "picker down", 502), &got); err != nil {
		t.Fatal(err)
	}
	e := got["error"]
	if e["message"] != "picker down" || e["type"] != "BadGatewayError" || e["code"] != float64(502) {
		t.Errorf("got %v", e)
	}
	if v, ok := e["param"]; !ok || v != nil {
		t.Errorf("param must be present and null, got %v", e)
	}
	if t418 := ErrorBody(418, "x", 418); !strings.Contains(string(t418), "BadRequestError") {
		t.Errorf("unknown 4xx type: %s", t418)
	}
	if s := ErrorBody(502, "x", "callout_unavailable"); !strings.Contains(string(s), `"code":"callout_unavailable"`) {
		t.Errorf("string code: %s", s)
	}
}
