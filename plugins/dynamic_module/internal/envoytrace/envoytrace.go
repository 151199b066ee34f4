// Package envoytrace gives the callout an Envoy span of its own, through the tracing part of
// Envoy's dynamic-module C ABI (get_active_span, span_spawn_child, span_get_trace_id,
// span_get_span_id, span_set_tag, child_span_finish).
//
// Why a shim: Envoy's async HTTP client does not trace a module's callout (the filter sends it
// with no parent span, so no span and no traceparent), and the Go SDK version this module can
// fetch (dynamic_modules v0.0.0-20260423231439-f1dd21b16c24) does not wrap the span functions
// yet, although Envoy 1.40 exports them. Newer SDKs wrap exactly these calls; when go.mod can
// move to one, replace this package with the SDK's span API.
//
// Two guards keep it safe on an Envoy or SDK that differs:
//   - every ABI symbol is looked up with dlsym first; a missing one disables the shim
//     (calling a missing symbol through lazy binding would abort Envoy);
//   - the filter's Envoy pointer is read from the SDK handle by reflection, and only if the
//     handle still has the expected unsafe-pointer field; otherwise the shim is disabled.
//
// Disabled means StartChild returns nil and the caller forwards the client's traceparent.
package envoytrace

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// Layout-compatible with envoy_dynamic_module_type_envoy_buffer / _module_buffer.
typedef struct { const char* ptr; size_t length; } eppkit_buffer;

typedef void* (*get_active_span_fn)(void* filter);
typedef void* (*spawn_child_fn)(void* filter, void* span, eppkit_buffer name);
typedef bool (*get_id_fn)(void* span, eppkit_buffer* out);
typedef void (*set_tag_fn)(void* span, eppkit_buffer key, eppkit_buffer value);
typedef void (*finish_fn)(void* child);

static void* eppkit_sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

static void* eppkit_get_active_span(void* fn, void* filter) {
  return ((get_active_span_fn)fn)(filter);
}
static void* eppkit_spawn_child(void* fn, void* filter, void* span, const char* name, size_t len) {
  eppkit_buffer b = {name, len};
  return ((spawn_child_fn)fn)(filter, span, b);
}
static bool eppkit_get_id(void* fn, void* span, eppkit_buffer* out) {
  return ((get_id_fn)fn)(span, out);
}
static void eppkit_set_tag(void* fn, void* span, const char* k, size_t kl, const char* v, size_t vl) {
  eppkit_buffer key = {k, kl};
  eppkit_buffer value = {v, vl};
  ((set_tag_fn)fn)(span, key, value);
}
static void eppkit_finish(void* fn, void* child) { ((finish_fn)fn)(child); }
*/
import "C"

import (
	"reflect"
	"sync"
	"unsafe"

	"github.com/envoyproxy/envoy/source/extensions/dynamic_modules/sdk/go/shared"
)

type abi struct {
	getActiveSpan, spawnChild, getTraceID, getSpanID, setTag, finish unsafe.Pointer
}

var (
	loadOnce sync.Once
	funcs    *abi // nil: the running Envoy lacks a symbol
)

func lookup(name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.eppkit_sym(cs)
}

func load() *abi {
	loadOnce.Do(func() {
		a := &abi{
			getActiveSpan: lookup("envoy_dynamic_module_callback_http_get_active_span"),
			spawnChild:    lookup("envoy_dynamic_module_callback_http_span_spawn_child"),
			getTraceID:    lookup("envoy_dynamic_module_callback_http_span_get_trace_id"),
			getSpanID:     lookup("envoy_dynamic_module_callback_http_span_get_span_id"),
			setTag:        lookup("envoy_dynamic_module_callback_http_span_set_tag"),
			finish:        lookup("envoy_dynamic_module_callback_http_child_span_finish"),
		}
		if a.getActiveSpan != nil && a.spawnChild != nil && a.getTraceID != nil && a.getSpanID != nil &&
			a.setTag != nil && a.finish != nil {
			funcs = a
		}
	})
	return funcs
}

// filterPointer digs the Envoy-side filter pointer out of the SDK's handle: the first field of
// the SDK's (unexported) handle struct, hostPluginPtr. Returns nil on any other layout.
func filterPointer(handle shared.HttpFilterHandle) unsafe.Pointer {
	v := reflect.ValueOf(handle)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("hostPluginPtr")
	if !f.IsValid() || f.Kind() != reflect.UnsafePointer {
		return nil
	}
	return f.UnsafePointer() // reading an unexported pointer field is allowed; Interface() is not
}

// Span is a child span of the request's active span, owned by the module until Finish.
type Span struct {
	fns   *abi
	child unsafe.Pointer
}

// StartChild spawns a child of the request's active Envoy span. It returns nil when tracing is
// off for the request, or when the shim is disabled (see the package comment). Call it on the
// worker thread, inside an OnRequest* callback.
func StartChild(handle shared.HttpFilterHandle, operation string) *Span {
	fns := load()
	if fns == nil {
		return nil
	}
	filter := filterPointer(handle)
	if filter == nil {
		return nil
	}
	active := C.eppkit_get_active_span(fns.getActiveSpan, filter)
	if active == nil {
		return nil
	}
	name := C.CString(operation)
	defer C.free(unsafe.Pointer(name))
	child := C.eppkit_spawn_child(fns.spawnChild, filter, active, name, C.size_t(len(operation)))
	if child == nil {
		return nil
	}
	return &Span{fns: fns, child: child}
}

func (s *Span) id(fn unsafe.Pointer) string {
	var out C.eppkit_buffer
	if !bool(C.eppkit_get_id(fn, s.child, &out)) || out.ptr == nil || out.length == 0 {
		return ""
	}
	// The buffer is Envoy's thread-local storage: copy before the next tracing call.
	return C.GoStringN(out.ptr, C.int(out.length))
}

// IDs returns the span's trace id and span id as Envoy's tracer prints them (hex for OTel).
func (s *Span) IDs() (traceID, spanID string) {
	if s == nil || s.child == nil {
		return "", ""
	}
	return s.id(s.fns.getTraceID), s.id(s.fns.getSpanID)
}

// SetTag sets a string attribute on the span.
func (s *Span) SetTag(key, value string) {
	if s == nil || s.child == nil {
		return
	}
	k, v := C.CString(key), C.CString(value)
	defer C.free(unsafe.Pointer(k))
	defer C.free(unsafe.Pointer(v))
	C.eppkit_set_tag(s.fns.setTag, s.child, k, C.size_t(len(key)), v, C.size_t(len(value)))
}

// Finish ends the span; later calls do nothing.
func (s *Span) Finish() {
	if s == nil || s.child == nil {
		return
	}
	C.eppkit_finish(s.fns.finish, s.child)
	s.child = nil
}
