package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// NewFastHTTPServer returns the fasthttp server Sluice runs the proxy
// handler on. Streams set their own write deadline (their total budget), so
// there is no server-wide write timeout to cut them.
func NewFastHTTPServer(s *Server) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                       s.Handler,
		Name:                          "sluice",
		ReadTimeout:                   60 * time.Second, // reading one request
		IdleTimeout:                   120 * time.Second,
		MaxRequestBodySize:            32 << 20,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		ReadBufferSize:                16 << 10,
		Logger:                        fasthttpLogger{s.log},
	}
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
