package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
)

// NewFastHTTPServer returns the fasthttp server Sluice runs the proxy
// handler on, with the server block of the config in force: apply one
// before. server.max_connections, server.read_timeout and
// server.idle_timeout are read here, once; the other server keys are read
// per request (or connection) and follow reloads.
//
// Sluice holds connections to server.max_connections and
// server.max_conns_per_ip itself (conns.go), closing idle connections
// first; fasthttp's own ceiling is twice max_connections, a backstop that
// only connections being closed or refused can reach.
//
// Request bodies are streamed to the handler, which reads them within
// server.max_request_body and the buffer budget after routing: a body is
// never buffered before Sluice knows where it goes and that it fits.
// Responses that fasthttp writes whole get server.write_timeout for the
// whole write; bodies in reader mode (streams, relayed answers) set their
// own, moving, write deadline.
func NewFastHTTPServer(s *Server) *fasthttp.Server {
	sc := config.DefaultServer()
	if cfg := s.Config(); cfg != nil {
		sc = cfg.Server
	}
	s.conns.mu.Lock()
	s.conns.limit = sc.MaxConnections
	s.conns.mu.Unlock()
	return &fasthttp.Server{
		Handler:                       s.Handler,
		HeaderReceived:                s.requestConfig,
		ExpectHandler:                 s.expectContinue,
		ErrorHandler:                  s.requestError,
		ConnState:                     s.connState,
		Name:                          "sluice",
		Concurrency:                   2 * sc.MaxConnections,
		ReadTimeout:                   sc.ReadTimeout, // one request, headers and body
		IdleTimeout:                   sc.IdleTimeout,
		StreamRequestBody:             true,
		MaxRequestBodySize:            1, // with streaming: bytes read before the handler runs
		DisablePreParseMultipartForm:  true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		ReadBufferSize:                maxHeaderBytes,
		WriteBufferSize:               clientWriteBuffer,
		Logger:                        fasthttpLogger{s.log},
	}
}

// maxHeaderBytes is the read buffer of a client connection, which bounds
// a request's line and headers: more is answered 431.
const maxHeaderBytes = 16 << 10

// clientWriteBuffer is the write buffer of a client connection (fasthttp's
// default, set here because stream bodies are sized to it): a streamed
// body's chunk of up to maxClientChunk bytes, with its framing, goes out in
// one write. Each open stream holds one.
const clientWriteBuffer = 4 << 10

// maxClientChunk is the most payload a stream hands fasthttp at once: the
// write buffer less the chunk framing (size line and CRLFs).
const maxClientChunk = clientWriteBuffer - 16

// requestConfig gives each request the write timeout in force.
func (s *Server) requestConfig(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return fasthttp.RequestConfig{WriteTimeout: time.Duration(s.snap.Load().serverLimits.writeTimeout)}
}

// expectContinue answers "Expect: 100-continue": a body over
// server.max_request_body on a route is refused with 413 (in the
// provider's shape) before the client sends it; anything else continues
// and is decided by the handler.
func (s *Server) expectContinue(ctx *fasthttp.RequestCtx) int {
	snap := s.snap.Load()
	if ctx.Request.Header.ContentLength() <= snap.serverLimits.maxRequestBody {
		return fasthttp.StatusContinue
	}
	p, rest := snap.router.match(ctx.Host(), requestPath(ctx))
	if p == nil {
		return fasthttp.StatusContinue // the handler answers 404
	}
	st := getStream(s, p)
	st.dialect = p.dialectFor(rest)
	s.reject(ctx, st, s.now(), outBodyTooLarge)
	return fasthttp.StatusRequestEntityTooLarge
}

// requestError answers a request fasthttp could not parse. Headers over
// maxHeaderBytes get 431 in the OpenAI error shape (no route is known yet
// to pick another); the rest get fasthttp's plain answers.
func (s *Server) requestError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		answer(ctx, s.snap.Load().noRoute, 0, outHeadersTooLarge, 0)
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		ctx.Error("Request timeout", fasthttp.StatusRequestTimeout)
		return
	}
	ctx.Error("Error when parsing request", fasthttp.StatusBadRequest)
}

// fasthttpLogger sends fasthttp's connection-level messages (client write
// errors, streams cut short) to the debug log: Sluice reports what matters
// through its own logs and metrics.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug(fmt.Sprintf(format, safeArgs(args)...), "source", "fasthttp")
	}
}
