package sim

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/feedback"
)

// TestQuota: a request counts its prompt plus max_tokens against the
// tokens per minute and one against the requests per minute; what is left
// is reported on every answer in the configured style, and a request that
// does not fit is answered 429 with retry-after-ms saying when it would.
func TestQuota(t *testing.T) {
	for _, style := range []string{QuotaHeadersOpenAI, QuotaHeadersAnthropic} {
		t.Run(style, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			cfg := fast()
			cfg.TimeScale = 1 // a real minute: the quota's window
			cfg.Clock = func() time.Time { return now }
			cfg.Quota = Quota{RPM: 60, TPM: 1000, Headers: style}
			h := start(t, cfg, false)
			path := "/v1/chat/completions"
			if style == QuotaHeadersAnthropic {
				path = "/v1/messages"
			}
			body := `{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hi"}]}`
			learn := func(hdr http.Header) feedback.RateLimits {
				var rl feedback.RateLimits
				for _, dim := range []string{"requests", "tokens"} {
					for _, f := range []string{"limit", "remaining", "reset"} {
						name := "x-ratelimit-" + f + "-" + dim
						if style == QuotaHeadersAnthropic {
							name = "anthropic-ratelimit-" + dim + "-" + f
						}
						rl.Header([]byte(name), []byte(hdr.Get(name)), now)
					}
				}
				return rl
			}
			for i := 0; i < 2; i++ {
				resp := h.mustPost(path, body, "x-sim-prompt-tokens", "100", "x-sim-output-tokens", "5")
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: %d", i, resp.StatusCode)
				}
				rl := learn(resp.Header)
				wantTok := int64(1000 - 400*(i+1))
				if rl.Tokens.Limit != 1000 || rl.Tokens.Remaining != wantTok || rl.Requests.Remaining != int64(59-i) ||
					rl.Tokens.Reset != time.Duration(400*(i+1))*time.Minute/1000 {
					t.Fatalf("request %d: headers %+v, want %d tokens left", i, rl, wantTok)
				}
			}
			// 200 tokens left, the third needs 400: refused, fits in 12 s.
			resp := h.mustPost(path, body, "x-sim-prompt-tokens", "100")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ms, _ := strconv.Atoi(resp.Header.Get("retry-after-ms")); resp.StatusCode != 429 || ms != 12000 {
				t.Errorf("over quota: %d, retry-after-ms %q, want 429, 12000", resp.StatusCode, resp.Header.Get("retry-after-ms"))
			}
			if rl := learn(resp.Header); rl.Tokens.Remaining != 200 {
				t.Errorf("the refusal reports %d tokens left, want 200", rl.Tokens.Remaining)
			}
			if st := h.s.Stats(); st.QuotaLimited != 1 || st.QuotaRequests != 2 || st.QuotaTokens != 800 || st.Rejected429 != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestQuotaPerKeyAndModel: with Quota.Per, each API key (and each model)
// spends its own quota: one spent key or model refuses only its own
// requests, and reports its own remaining count.
func TestQuotaPerKeyAndModel(t *testing.T) {
	for _, per := range []string{QuotaPerKey, QuotaPerModel, QuotaPerKeyModel} {
		t.Run(per, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			cfg := fast()
			cfg.TimeScale = 1
			cfg.Clock = func() time.Time { return now }
			cfg.Quota = Quota{RPM: 2, Headers: QuotaHeadersOpenAI, Per: per}
			h := start(t, cfg, false)
			post := func(key, model string) *http.Response {
				resp := h.mustPost("/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`,
					"Authorization", "Bearer "+key, "x-sim-output-tokens", "1")
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp
			}
			for i := range 3 {
				resp := post("spent", "big")
				if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
					t.Fatalf("spent key, request %d: %d, want %d", i, resp.StatusCode, want)
				}
			}
			other, model := "spent", "big"
			if per != QuotaPerModel {
				other = "other"
			}
			if per != QuotaPerKey {
				model = "small"
			}
			resp := post(other, model)
			if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-requests") != "1" {
				t.Fatalf("%s/%s: %d, remaining %q; want 200 with its own quota", other, model, resp.StatusCode, resp.Header.Get("x-ratelimit-remaining-requests"))
			}
		})
	}
}
