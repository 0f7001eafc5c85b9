// client_lib.mjs - what the scripts that drive `dsv41 serve` through an npm client share: their
// arguments (BASE_URL EXPECTED_FILE MAX_TOKENS, where EXPECTED_FILE holds the greedy reply
// `dsv41 run -p` gives to "Hello there"), the packages of tests/node, counted checks and the
// closing "N passed, N failed" line.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("./node/", import.meta.url));
/* An npm package of tests/node (its default export when it has one). */
export const load = (name) => require(name).default ?? require(name);

const [base, expectedFile, maxTokensArg] = process.argv.slice(2);
export { base };
export const expected = readFileSync(expectedFile, "utf8");
export const maxTokens = Number(maxTokensArg);

let passed = 0, failed = 0;

export function check(ok, what) {
    if (ok) passed++;
    else { failed++; console.log("FAIL: " + what); }
}

/* Runs fn; an exception it throws is one failed check named what. */
export async function step(what, fn) {
    try { await fn(); } catch (e) { check(false, `${what}: ${e}`); }
}

export function finish() {
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}
