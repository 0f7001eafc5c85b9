// serve_page.mjs - the chat page at `/` in a real browser: Debian's chromium, headless, driven by
// puppeteer-core. Sends a message and sees the streamed reply, shows HTML typed by the user as
// literal text, stops a long reply (and the server frees the slot), finds the conversation
// after a reload, and logs no page errors. Usage: node tests/serve_page.mjs BASE_URL [SHOT.png]
// Prints "N passed, N failed".
import { createRequire } from "node:module";

const require = createRequire(new URL("./node/", import.meta.url));
const puppeteer = require("puppeteer-core");

const [base, shot] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(ok, what) {
    if (ok) passed++;
    else { failed++; console.log("FAIL: " + what); }
}

const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage", "--no-first-run",
           "--disable-extensions", "--disable-sync", "--disable-default-apps", "--mute-audio", "--disable-component-update"],
});
const errors = [];
try {
    const page = await browser.newPage();
    await page.setViewport({ width: 900, height: 640 });
    page.on("pageerror", (e) => errors.push("page error: " + e));
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    page.on("dialog", async (d) => { errors.push("dialog: " + d.message()); await d.dismiss(); });
    page.on("request", (r) => { if (!r.url().startsWith(base)) errors.push("request elsewhere: " + r.url()); });

    const resp = await page.goto(base + "/", { waitUntil: "networkidle0" });
    const h = resp.headers();
    check(resp.status() === 200 && (h["content-security-policy"] || "").startsWith("default-src 'self'") &&
          h["x-content-type-options"] === "nosniff", `GET / headers ${JSON.stringify(h)}`);

    const setField = (sel, value) => page.$eval(sel, (e, v) => { e.value = v; e.dispatchEvent(new Event("change")); }, value);
    const idle = () => page.waitForFunction(() => !document.querySelector("#send").disabled &&
        document.querySelector("#messages").lastElementChild?.querySelector(".stats, .error"), { timeout: 120000 });
    const assistants = () => page.$$eval('[data-role="assistant"]', (es) => es.map((e) => e.textContent));

    await setField("#max-tokens", "12");
    await setField("#temperature", "0");
    await page.type("#prompt", "Hello there");
    await page.keyboard.press("Enter");
    await idle();
    let a = await assistants();
    check(a.length === 1 && a[0].length > 0 && /tokens\/s/.test(a[0]), `a streamed reply: ${JSON.stringify(a)}`);

    // special tokens: the server's rule unless the setting shows them
    const bodies = [];
    page.on("request", (r) => { if (r.url().endsWith("/v1/chat/completions")) bodies.push(JSON.parse(r.postData() || "{}")); });
    await setField("#special", "shown");
    await page.type("#prompt", "Again");
    await page.keyboard.press("Enter");
    await idle();
    await setField("#special", "");
    check(bodies.length === 1 && bodies[0].skip_special_tokens === false, `the special-token setting: ${JSON.stringify(bodies)}`);

    const html = "<img src=x onerror=alert(1)> and <b>bold</b>";
    await page.type("#prompt", "line one");
    await page.keyboard.down("Shift");
    await page.keyboard.press("Enter");
    await page.keyboard.up("Shift");
    await page.type("#prompt", html);
    await page.click("#send");
    await idle();
    const users = await page.$$eval('[data-role="user"]', (es) => es.map((e) => e.textContent));
    const tags = await page.$$eval("#messages img, #messages b", (es) => es.length);
    check(users.length === 3 && users[2] === "line one\n" + html && tags === 0, `HTML stays text: ${JSON.stringify(users)}, ${tags} elements`);

    await setField("#max-tokens", "3000");
    await setField("#temperature", "0.8");
    await page.type("#prompt", "Tell me a long story");
    await page.click("#send");
    await page.waitForFunction(() => (document.querySelector("#messages").lastElementChild?.textContent || "").length > 20, { timeout: 60000 });
    await page.click("#stop");
    await idle();
    a = await assistants();
    check(/stopped/.test(a[a.length - 1]), `the stop button ends the reply: ${JSON.stringify(a[a.length - 1].slice(-60))}`);
    let freed = false;
    for (let i = 0; i < 50 && !freed; i++) {
        const m = await (await fetch(base + "/metrics")).text();
        freed = /^dsv41_slots_busy 0$/m.test(m);
        if (!freed) await new Promise((r) => setTimeout(r, 100));
    }
    check(freed, "the server cancels the stopped reply and frees its slot");

    const before = await page.$$eval(".msg", (es) => es.map((e) => e.dataset.role + ":" + e.textContent));
    await page.reload({ waitUntil: "networkidle0" });
    const after = await page.$$eval(".msg", (es) => es.map((e) => e.dataset.role + ":" + e.textContent));
    check(before.length === 8 && JSON.stringify(before) === JSON.stringify(after), `the conversation survives a reload: ${before.length} vs ${after.length}`);
    if (shot) await page.screenshot({ path: shot });

    await page.click("#new-chat");
    check((await page.$$(".msg")).length === 0, "new chat empties the conversation");
} catch (e) {
    check(false, String(e));
} finally {
    await browser.close();
}
check(errors.length === 0, "no page errors: " + errors.join(" | "));
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
