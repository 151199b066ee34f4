// Package callout is the eppkit_callout HTTP filter: it asks an external routing service
// (POST /pick, see docs/CONTRACTS.md) which endpoint serves the request, then sets the
// destination (primary, then fallbacks) as the dynamic metadata envoy.lb /
// x-gateway-destination-endpoint and the request header of the same name, which Envoy's
// "picked" cluster (override_host) tries in order.
//
// The decision logic (Decide, ParseConfig, CalloutHeaders, ErrorBody) is plain Go and is
// unit-tested without Envoy; filter.go wires it to the SDK's HttpFilter interface.
package callout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Config is the filter's JSON configuration (the filter_config StringValue in the Envoy bootstrap).
type Config struct {
	// Cluster is the Envoy cluster the callout is sent to (required).
	Cluster string `json:"cluster"`
	// Authority is the :authority of the callout request. Defaults to the cluster name.
	Authority string `json:"authority"`
	// Path is the callout request path. Defaults to /pick.
	Path string `json:"path"`
	// TimeoutMs bounds the whole callout (connect + answer). Defaults to 1000.
	TimeoutMs uint64 `json:"timeout_ms"`
	// FailureModeAllow: when the callout cannot be made or answers nonsense, let the request
	// through without a destination (the route table sends it to the pool) instead of a 502.
	FailureModeAllow bool `json:"failure_mode_allow"`
	// DestinationHeader is the request header that carries the picked "ip:port".
	// Defaults to x-gateway-destination-endpoint.
	DestinationHeader string `json:"destination_header"`
	// LbMetadataNamespace is the dynamic-metadata namespace the destination goes into, under the
	// key DestinationHeader (the GAIE EPP protocol: header and metadata carry the same value).
	// Defaults to envoy.lb.
	LbMetadataNamespace string `json:"lb_metadata"`
	// ForwardHeaders are client request headers passed on to the callout besides the contract's
	// (e.g. GAIE's test-epp-endpoint-selection).
	ForwardHeaders []string `json:"forward_headers"`
	// AllowedEndpoints, when not empty, is the only set of "ip:port" the filter routes to;
	// any other pick is treated as a callout failure.
	AllowedEndpoints []string `json:"allowed_endpoints"`
}

const (
	DefaultPath              = "/pick"
	DefaultTimeoutMs         = 1000
	DefaultDestinationHeader = "x-gateway-destination-endpoint"
	DefaultLbMetadata        = "envoy.lb"
)

// ParseConfig reads the JSON config, fills defaults and refuses what cannot work.
func ParseConfig(raw []byte) (*Config, error) {
	cfg := &Config{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("eppkit_callout: empty filter_config; need at least {\"cluster\": \"...\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("eppkit_callout: bad filter_config %q: %w", string(raw), err)
	}
	if cfg.Cluster == "" {
		return nil, errors.New("eppkit_callout: filter_config.cluster is required")
	}
	if cfg.Authority == "" {
		cfg.Authority = cfg.Cluster
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if !strings.HasPrefix(cfg.Path, "/") {
		return nil, fmt.Errorf("eppkit_callout: filter_config.path %q must start with /", cfg.Path)
	}
	if cfg.TimeoutMs == 0 {
		cfg.TimeoutMs = DefaultTimeoutMs
	}
	if cfg.DestinationHeader == "" {
		cfg.DestinationHeader = DefaultDestinationHeader
	}
	cfg.DestinationHeader = strings.ToLower(cfg.DestinationHeader)
	if cfg.LbMetadataNamespace == "" {
		cfg.LbMetadataNamespace = DefaultLbMetadata
	}
	for i, name := range cfg.ForwardHeaders {
		cfg.ForwardHeaders[i] = strings.ToLower(name)
	}
	for _, ep := range cfg.AllowedEndpoints {
		if _, err := ParseEndpoint(ep); err != nil {
			return nil, fmt.Errorf("eppkit_callout: allowed_endpoints: %w", err)
		}
	}
	return cfg, nil
}

// ParseEndpoint checks that s is "ip:port" (the picked cluster's endpoints are IP literals) and
// returns it in canonical form.
func ParseEndpoint(s string) (string, error) {
	s = strings.TrimSpace(s)
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q is not host:port: %v", s, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", fmt.Errorf("endpoint %q: %q is not an IP address (the picked cluster resolves no names)", s, host)
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p <= 0 || p > 65535 || fmt.Sprint(p) != port {
		return "", fmt.Errorf("endpoint %q: bad port %q", s, port)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

func (c *Config) allowed(endpoint string) bool {
	if len(c.AllowedEndpoints) == 0 {
		return true
	}
	for _, ep := range c.AllowedEndpoints {
		if canon, err := ParseEndpoint(ep); err == nil && canon == endpoint {
			return true
		}
	}
	return false
}
