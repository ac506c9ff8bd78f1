// An OpenAI-compatible server for the real engine in Sluice's benchmark
// suite: llama.cpp through node-llama-cpp (which has no server of its
// own), serving POST /v1/chat/completions, streamed or not, with
// -parallel sequences decoded in one batch (continuous batching, as
// llama-server and vLLM do). A request waits for a free sequence in
// arrival order; GET /stats tells how long requests waited for one and
// how long to their first token, so the engine's own queue is visible.
// POST /stats/reset starts the counts again.
//
// node server.mjs -model FILE [-listen 127.0.0.1:8090] [-parallel 8]
//   [-threads 1] [-ctx-per-seq 512] [-max-tokens 64]
import http from "node:http";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const args = { model: "", listen: "127.0.0.1:8090", parallel: 8, threads: 1, "ctx-per-seq": 512, "max-tokens": 64 };
for (let i = 2; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^-+/, "");
    if (!(k in args)) {
        console.error(`server.mjs: unknown flag -${k}`);
        process.exit(2);
    }
    args[k] = typeof args[k] === "number" ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
if (!args.model) {
    console.error("server.mjs: -model FILE is required");
    process.exit(2);
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn });
const model = await llama.loadModel({ modelPath: args.model });
const context = await model.createContext({
    sequences: args.parallel,
    contextSize: args.parallel * args["ctx-per-seq"],
    threads: args.threads,
});
const free = [];
for (let i = 0; i < args.parallel; i++) free.push(context.getSequence());
const waiting = []; // resolvers of requests waiting for a sequence, in arrival order

function takeSequence() {
    if (free.length > 0) return Promise.resolve(free.pop());
    return new Promise((resolve) => waiting.push(resolve));
}

async function giveBack(seq) {
    await seq.clearHistory();
    const next = waiting.shift();
    if (next) next(seq);
    else free.push(seq);
}

// Counters since the last reset; times in milliseconds.
let stats;
function resetStats() {
    stats = { started: Date.now(), requests: 0, completed: 0, aborted: 0, outputTokens: 0, queueWait: [], ttft: [], ttftInSlot: [], running: 0, maxRunning: 0 };
}
resetStats();

function quantile(xs, q) {
    if (xs.length === 0) return 0;
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

function summary() {
    const secs = (Date.now() - stats.started) / 1000;
    const q = (xs) => ({ p50: quantile(xs, 0.5), p90: quantile(xs, 0.9), p99: quantile(xs, 0.99), max: quantile(xs, 1) });
    return {
        parallel: args.parallel, seconds: secs, requests: stats.requests, completed: stats.completed, aborted: stats.aborted,
        output_tokens: stats.outputTokens, tokens_per_second: stats.outputTokens / secs,
        running: stats.running, waiting: waiting.length, max_running: stats.maxRunning,
        queue_wait_ms: q(stats.queueWait), ttft_ms: q(stats.ttft), ttft_in_slot_ms: q(stats.ttftInSlot),
    };
}

function chatPrompt(messages) {
    let p = "";
    for (const m of messages ?? []) {
        const content = typeof m.content === "string" ? m.content : (m.content ?? []).map((c) => c.text ?? "").join("");
        p += `<|im_start|>${m.role}\n${content}<|im_end|>\n`;
    }
    return p + "<|im_start|>assistant\n";
}

async function complete(req, res, body) {
    const arrived = Date.now();
    stats.requests++;
    let gone = false;
    res.on("close", () => { gone = !res.writableFinished; });
    const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? args["max-tokens"];
    const tokens = model.tokenize(chatPrompt(body.messages), true);
    const seq = await takeSequence();
    const slotAt = Date.now();
    stats.queueWait.push(slotAt - arrived);
    stats.running++;
    stats.maxRunning = Math.max(stats.maxRunning, stats.running);
    const id = `chatcmpl-${arrived}-${stats.requests}`;
    const created = Math.floor(arrived / 1000);
    const chunk = (delta, finish) => `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: body.model ?? "engine", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    let out = 0, text = "", finish = "length";
    try {
        if (gone) return;
        if (body.stream) {
            res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        }
        const eos = model.tokens.eos;
        for await (const tok of seq.evaluate(tokens, { temperature: 0 })) {
            if (gone) break;
            if (out === 0) {
                stats.ttft.push(Date.now() - arrived);
                stats.ttftInSlot.push(Date.now() - slotAt);
            }
            if (tok === eos) { finish = "stop"; break; }
            out++;
            stats.outputTokens++; // counted as made, so a run's long requests count too
            const piece = model.detokenize([tok]);
            if (body.stream) res.write(chunk(out === 1 ? { role: "assistant", content: piece } : { content: piece }, null));
            else text += piece;
            if (out >= maxTokens) break;
        }
        const usage = { prompt_tokens: tokens.length, completion_tokens: out, total_tokens: tokens.length + out };
        if (gone) { stats.aborted++; return; }
        if (body.stream) {
            res.write(chunk({}, finish));
            res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: body.model ?? "engine", choices: [], usage })}\n\n`);
            res.end("data: [DONE]\n\n");
        } else {
            res.writeHead(200, { "content-type": "application/json" });
            res.end(JSON.stringify({ id, object: "chat.completion", created, model: body.model ?? "engine", choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: finish }], usage }));
        }
        stats.completed++;
    } finally {
        stats.running--;
        await giveBack(seq);
    }
}

const [host, port] = args.listen.split(/:(?=[^:]*$)/);
http.createServer((req, res) => {
    if (req.method === "GET" && req.url === "/stats") {
        res.writeHead(200, { "content-type": "application/json" });
        return res.end(JSON.stringify(summary()));
    }
    if (req.method === "POST" && req.url === "/stats/reset") {
        resetStats();
        res.writeHead(204);
        return res.end();
    }
    if (req.method !== "POST" || !req.url.startsWith("/v1/chat/completions")) {
        res.writeHead(404, { "content-type": "application/json" });
        return res.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }));
    }
    let raw = "";
    req.setEncoding("utf8");
    req.on("data", (d) => { raw += d; });
    req.on("end", () => {
        let body;
        try { body = JSON.parse(raw); } catch {
            res.writeHead(400, { "content-type": "application/json" });
            return res.end(JSON.stringify({ error: { message: "body is not JSON", type: "invalid_request_error" } }));
        }
        complete(req, res, body).catch((err) => {
            console.error("server.mjs:", err);
            if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
            res.end(JSON.stringify({ error: { message: String(err), type: "server_error" } }));
        });
    });
}).listen(Number(port), host, () => {
    console.error(`server.mjs: serving ${args.model} on http://${args.listen} with ${args.parallel} sequences, ${args.threads} thread(s)`);
});
