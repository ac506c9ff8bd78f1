// Patches node-llama-cpp 3.21.1's batch dispatcher (LlamaContext.js) to
// decode one batch per hold of the context lock, then schedule the next.
//
// As shipped, the dispatcher keeps the context lock while any sequence
// has a decode queued, and clearing a finished request's sequence needs
// that lock: under steady load no sequence is freed until every running
// one has finished, so the engine runs in waves (a batch starts and ends
// together) instead of continuous batching. Releasing the lock after each
// batch lets the clears queued on it run between batches.
//
// Usage: node patch.mjs DIR (the directory holding node_modules). It is
// idempotent, and fails if the code it patches is not found.
import fs from "node:fs";
import path from "node:path";

const file = path.join(process.argv[2] ?? ".", "node_modules/node-llama-cpp/dist/evaluator/LlamaContext/LlamaContext.js");
const marker = "/* sluice: one batch per lock hold */";
const from = `                        await decodeTokenBatchItems(currentBatchItems, currentBatchSize);
                        shouldHaveAnotherLoop = this._queuedDecodes.length > 0;`;
const to = `                        await decodeTokenBatchItems(currentBatchItems, currentBatchSize);
                        ${marker}
                        shouldHaveAnotherLoop = false;
                        if (this._queuedDecodes.length > 0)
                            setImmediate(() => this._scheduleDecode());`;
let src = fs.readFileSync(file, "utf8");
if (src.includes(marker)) {
    console.log(`patch.mjs: ${file} already patched`);
    process.exit(0);
}
if (!src.includes(from)) {
    console.error(`patch.mjs: the dispatcher loop was not found in ${file}: not node-llama-cpp 3.21.1?`);
    process.exit(1);
}
fs.writeFileSync(file, src.replace(from, to));
console.log(`patch.mjs: patched ${file}`);
