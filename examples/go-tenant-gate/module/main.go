// Command tenantgate is an Envoy dynamic module (go build -buildmode=c-shared) with one HTTP
// filter, tenant_gate: requests must carry "authorization: Bearer <key>" with a key the config
// knows. An unknown or missing key gets an OpenAI-style 401 from Envoy itself, so nothing behind
// the gate (the endpoint picker, the model) ever sees it; a known key's tenant is put on the
// request and echoed on the response in x-tenant.
//
// filter_config (JSON): {"tenants": {"<api key>": "<tenant>", ...}}
package main

import (
	"encoding/json"
	"errors"
	"strings"

	sdk "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go"
	_ "github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/abi"
	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
)

const (
	filterName   = "tenant_gate"
	tenantHeader = "x-tenant"
)

func init() {
	sdk.RegisterHttpFilterConfigFactories(map[string]shared.HttpFilterConfigFactory{
		filterName: configFactory{},
	})
}

func main() {}

type config struct {
	Tenants map[string]string `json:"tenants"`
}

func parseConfig(raw []byte) (*config, error) {
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, errors.New(filterName + ": filter_config must be JSON: " + err.Error())
	}
	if len(cfg.Tenants) == 0 {
		return nil, errors.New(filterName + `: filter_config needs {"tenants": {"<api key>": "<tenant>"}}`)
	}
	return &cfg, nil
}

type configFactory struct{}

func (configFactory) Create(handle shared.HttpFilterConfigHandle, raw []byte) (shared.HttpFilterFactory, error) {
	cfg, err := parseConfig(raw)
	if err != nil {
		handle.Log(shared.LogLevelError, "%v", err)
		return nil, err
	}
	return &factory{cfg: cfg}, nil
}

func (configFactory) CreatePerRoute(raw []byte) (any, error) { return nil, nil }

type factory struct {
	shared.EmptyHttpFilterFactory
	cfg *config
}

func (f *factory) Create(handle shared.HttpFilterHandle) shared.HttpFilter {
	return &filter{handle: handle, cfg: f.cfg}
}

type filter struct {
	shared.EmptyHttpFilter
	handle shared.HttpFilterHandle
	cfg    *config
	tenant string
}

func (f *filter) OnRequestHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	key, _ := strings.CutPrefix(headers.GetOne("authorization").ToString(), "Bearer ")
	tenant, ok := f.cfg.Tenants[strings.TrimSpace(key)]
	if !ok {
		f.handle.SendLocalResponse(401, [][2]string{{"content-type", "application/json"}},
			errorBody("Incorrect API key provided.", "AuthenticationError", "invalid_api_key"), "tenant_gate_unknown_key")
		return shared.HeadersStatusStop
	}
	f.tenant = tenant
	headers.Set(tenantHeader, tenant) // a client cannot choose its tenant: the gate sets it
	return shared.HeadersStatusContinue
}

func (f *filter) OnResponseHeaders(headers shared.HeaderMap, endOfStream bool) shared.HeadersStatus {
	if f.tenant != "" {
		headers.Set(tenantHeader, f.tenant)
	}
	return shared.HeadersStatusContinue
}

// errorBody is an OpenAI-style error: {"error": {"message", "type", "param", "code"}}.
func errorBody(message, errType, code string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": errType, "param": nil, "code": code}})
	return b
}
