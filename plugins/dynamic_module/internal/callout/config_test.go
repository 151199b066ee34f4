package callout

import (
	"strings"
	"testing"
)

func TestParseConfig_defaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"cluster": "callout"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Authority != "callout" || cfg.Path != "/pick" || cfg.TimeoutMs != 1000 ||
		cfg.DestinationHeader != "x-gateway-destination-endpoint" || cfg.FailureModeAllow {
		t.Errorf("defaults not filled: %+v", cfg)
	}
}

func TestParseConfig_refuses(t *testing.T) {
	for _, tt := range []struct {
		name, raw, wantInErr string
	}{
		{"empty", ``, "empty filter_config"},
		{"no cluster", `{"path": "/pick"}`, "cluster is required"},
		{"unknown field (a typo must not pass silently)", `{"cluster": "c", "failure_mode_alow": true}`, "unknown field"},
		{"relative path", `{"cluster": "c", "path": "pick"}`, "must start with /"},
		{"host name in allowed_endpoints", `{"cluster": "c", "allowed_endpoints": ["vllm-0:8000"]}`, "not an IP address"},
		{"not JSON", `cluster=c`, "bad filter_config"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.raw))
			if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("ParseConfig(%q) error = %v, want one containing %q", tt.raw, err, tt.wantInErr)
			}
		})
	}
}

func TestParseConfig_destinationHeaderIsLowerCased(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"cluster": "c", "destination_header": "X-Dest"}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DestinationHeader != "x-dest" {
		t.Errorf("got %q", cfg.DestinationHeader)
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"127.0.0.1:8000", "127.0.0.1:8000", true},
		{" 10.0.0.7:80 ", "10.0.0.7:80", true},
		{"[::1]:8000", "[::1]:8000", true},
		{"localhost:8000", "", false}, // ORIGINAL_DST does not resolve names
		{"127.0.0.1", "", false},
		{"127.0.0.1:0", "", false},
		{"127.0.0.1:70000", "", false},
		{"127.0.0.1:80x", "", false},
		{"127.0.0.1:080", "", false},
		{"", "", false},
	} {
		got, err := ParseEndpoint(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q, ok=%t", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
