package proxy

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// streamKept are the fields of stream that a pooled stream keeps for its
// next request, and what reset must leave of them (checked below). Every
// other field must be zero after reset: a field added to stream without a
// reset fails TestPooledStreamComesBackZeroed until it is reset (in
// streamState, by the one assignment) or listed here with its check.
var streamKept = map[string]bool{
	"req": true, "resp": true, "uri": true, "reqBody": true, "respBuf": true,
	"attrs": true, "upstreamAttrs": true, "meter": true,
	// permit and mu belong to adaptive's and sync's own protocols: Acquire
	// grants the permit afresh, the mutex is unlocked at rest.
	"permit": true, "mu": true,
}

// TestPooledStreamComesBackZeroed fills every field of a stream but the
// kept ones with a value that is not zero, gives the kept buffers content,
// resets the stream as put does, and checks that nothing
// of the request it served is left: every field of streamState and of the
// fields shared with interrupt is zero, and the kept buffers are empty.
func TestPooledStreamComesBackZeroed(t *testing.T) {
	t.Parallel()
	st := new(stream)
	v := reflect.ValueOf(st).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if streamKept[f.Name] {
			continue
		}
		fill(t, f.Name, settable(v.Field(i)))
	}
	for _, name := range []string{"srv", "adm", "relayBody", "telemetry", "span", "client"} {
		if settable(v.FieldByName(name)).IsZero() {
			t.Fatalf("fill left %s zero", name)
		}
	}
	st.attrs = append(st.attrs[:0], attribute.String("k", "v"))
	st.upstreamAttrs = append(st.upstreamAttrs[:0], attribute.String("k", "v"))
	st.reqBody = append(st.reqBody[:0], "body"...)
	st.respBuf = append(st.respBuf[:0], "answer"...)
	st.req.SetRequestURI("/v1/chat/completions")
	st.resp.SetStatusCode(429)
	attrs := st.attrs

	st.reset()

	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if streamKept[f.Name] {
			continue
		}
		if f.Name == "streamState" {
			s := v.Field(i)
			for j := 0; j < s.NumField(); j++ {
				if !s.Field(j).IsZero() {
					t.Errorf("streamState.%s not zero after reset", s.Type().Field(j).Name)
				}
			}
			continue
		}
		if !v.Field(i).IsZero() {
			t.Errorf("stream.%s not zero after reset: reset it in put, or move it into streamState", f.Name)
		}
	}
	if len(st.reqBody) != 0 || len(st.respBuf) != 0 || len(st.attrs) != 0 || len(st.upstreamAttrs) != 0 {
		t.Errorf("kept buffers not emptied: reqBody %d, respBuf %d, attrs %d, upstreamAttrs %d",
			len(st.reqBody), len(st.respBuf), len(st.attrs), len(st.upstreamAttrs))
	}
	if attrs[0] != (attribute.KeyValue{}) {
		t.Error("span attributes not cleared: the pool would keep their values alive")
	}
	if string(st.req.RequestURI()) != "/" || st.resp.StatusCode() != 200 {
		t.Errorf("request or response not reset: URI %q, status %d", st.req.RequestURI(), st.resp.StatusCode())
	}
}

// TestPooledStreamForgetsPoolShort: a request whose rate reservation was
// refused from this replica's fleet pool (poolShort: worth trying again
// within max_wait) must not pass that on to the next request using the
// stream. A too-large request that found it set retried its refusal every
// millisecond for the whole max_wait.
func TestPooledStreamForgetsPoolShort(t *testing.T) {
	t.Parallel()
	st := new(stream)
	st.adm.poolShort = true
	st.reset()
	if st.adm.poolShort {
		t.Fatal("reset kept poolShort")
	}
}

// settable returns f (of an addressable struct) writable even when it is
// unexported.
func settable(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// fakeConn is a net.Conn value to fill a field with; it is never used.
type fakeConn struct{ net.Conn }

// fill sets v to a value that is not zero, recursively for structs and
// arrays, with a known implementation for interface types.
func fill(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.String:
		v.SetString("x")
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	case reflect.Chan:
		v.Set(reflect.MakeChan(v.Type(), 0))
	case reflect.Func:
		v.Set(reflect.MakeFunc(v.Type(), func([]reflect.Value) []reflect.Value {
			panic("filled func called")
		}))
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fill(t, name, v.Index(i))
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(t, name+"."+v.Type().Field(i).Name, settable(v.Field(i)))
		}
	case reflect.Interface:
		for _, c := range []any{
			errors.New("x"), strings.NewReader("x"), fakeConn{},
			trace.SpanFromContext(context.Background()),
		} {
			if cv := reflect.ValueOf(c); cv.Type().Implements(v.Type()) {
				v.Set(cv)
				return
			}
		}
		t.Fatalf("%s: no value to fill a %s with; add one to fill", name, v.Type())
	default:
		t.Fatalf("%s: cannot fill a %s", name, v.Kind())
	}
}
