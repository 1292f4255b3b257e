// The console as a person uses it: Debian's chromium, headless, driven by
// puppeteer-core against `ccctl console` on a real local cluster of 4 CPU
// workers. Every step asserts what the page shows; the screenshots it takes
// are the ones in docs/console.md.
//
//   node console_test.mjs CCCTL_BINARY OUT_DIR
//
// Prints one line per step and "console_browser_test: PASS" at the end;
// exits 1 with the failed step's reason otherwise.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import puppeteer from "puppeteer-core";

const [ccctl, outDir] = process.argv.slice(2);
if (!ccctl || !outDir) {
  console.error("usage: node console_test.mjs CCCTL_BINARY OUT_DIR");
  process.exit(2);
}
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
fs.mkdirSync(outDir, { recursive: true });
const work = fs.mkdtempSync(path.join(os.tmpdir(), "ccl-console-test-"));
const env = { ...process.env, CCCTL_STATE_DIR: path.join(work, "state") };
const children = [];
let browser = null;
const started = Date.now();

function log(line) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${line}`);
}

function fail(why) {
  throw new Error(why);
}

function ccctlSync(...args) {
  return execFileSync(ccctl, args, { env, encoding: "utf8", timeout: 120000 });
}

function startConsole(extraArgs, name) {
  const portFile = path.join(work, `${name}.port`);
  const out = fs.openSync(path.join(work, `${name}.log`), "w");
  const child = spawn(ccctl, ["console", "--listen", "127.0.0.1:0", "--port-file", portFile,
                              ...extraArgs], { env, stdio: ["ignore", out, out] });
  children.push(child);
  return { child, portFile, logFile: path.join(work, `${name}.log`) };
}

async function waitFor(what, predicate, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function readPort(handle) {
  return waitFor(`the console's port file (log: ${handle.logFile})`, () => {
    if (handle.child.exitCode !== null) {
      fail(`ccctl console exited ${handle.child.exitCode}: ${fs.readFileSync(handle.logFile, "utf8")}`);
    }
    try {
      const text = fs.readFileSync(handle.portFile, "utf8").trim();
      return text ? Number(text) : null;
    } catch {
      return null;
    }
  }, 20000);
}

// A page whose console errors and uncaught exceptions are collected: every
// page must load without any.
async function openPage(token) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 820 });
  page.errors = [];
  page.on("console", (message) => {
    if (message.type() === "error") page.errors.push(message.text());
  });
  page.on("pageerror", (error) => page.errors.push(String(error)));
  if (token !== undefined) {
    await page.evaluateOnNewDocument((t) => sessionStorage.setItem("ccl_console_token", t), token);
  }
  return page;
}

function expectNoErrors(page, where) {
  if (page.errors.length) fail(`${where}: console errors: ${page.errors.join(" | ")}`);
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(outDir, `${name}.png`), fullPage: false });
}

async function text(page, selector) {
  return page.$eval(selector, (node) => node.textContent);
}

async function main() {
  const viewerToken = "viewer-" + Math.random().toString(16).slice(2);
  const operatorToken = "operator-" + Math.random().toString(16).slice(2);
  fs.writeFileSync(path.join(work, "viewer.token"), viewerToken + "\n");
  fs.writeFileSync(path.join(work, "operator.token"), operatorToken + "\n");

  log(ccctlSync("cluster", "up", "--workers", "4").trim());
  const state = JSON.parse(fs.readFileSync(path.join(env.CCCTL_STATE_DIR, "state.json"), "utf8"));

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });

  // From `ccctl console` to the first World page that lists every rank.
  const page = await openPage(operatorToken);
  const t0 = Date.now();
  const consoleHandle = startConsole(["--viewer-token-file", path.join(work, "viewer.token"),
                                      "--operator-token-file", path.join(work, "operator.token")],
                                     "console");
  const port = await readPort(consoleHandle);
  const base = `http://127.0.0.1:${port}/`;
  await page.goto(base + "#world");
  await page.waitForFunction(() =>
    document.querySelectorAll("tr.member[data-state=ready]").length === 4, { timeout: 30000 });
  const firstRender = Date.now() - t0;
  log(`first World page with 4 ready ranks ${firstRender} ms after ccctl console started`);
  fs.writeFileSync(path.join(outDir, "first_render_ms.txt"), `${firstRender}\n`);
  // The session (role) and the world are two requests the page sends at once;
  // either may answer first, so wait for the session's answer, not its order.
  await page.waitForFunction(() => document.querySelector("#role").textContent !== "",
                             { timeout: 10000 })
      .catch(async () => fail(`no role after 10 s; banner: '${await text(page, "#banner")}'`));
  const role = await text(page, "#role");
  if (role !== "operator") fail(`role shows '${role}', want operator`);
  await shot(page, "world");
  expectNoErrors(page, "World");

  // Every page loads without console errors.
  for (const name of ["ops", "timeline", "bench", "doctor", "world"]) {
    await page.goto(base + "#" + name);
    await page.waitForSelector(`#page-${name}:not([hidden])`, { timeout: 10000 });
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expectNoErrors(page, `page ${name}`);
    log(`page ${name} loads without console errors`);
  }

  // A bench run from the page draws its curve.
  await page.goto(base + "#bench");
  await page.$eval("#bench-min", (n) => { n.value = "1K"; });
  await page.$eval("#bench-max", (n) => { n.value = "256K"; });
  await page.$eval("#bench-factor", (n) => { n.value = "4"; });
  await page.$eval("#bench-iters", (n) => { n.value = "3"; });
  // The first sweep becomes the baseline the second is drawn beside.
  await page.click("#bench-run");
  await page.waitForSelector("#bench-chart polyline.series.current", { timeout: 120000 });
  await page.click("#bench-save");
  await page.waitForSelector("#bench-chart polyline.series.baseline", { timeout: 10000 });
  await page.$eval("#bench-status", (n) => { n.textContent = ""; });
  await page.click("#bench-run");
  await page.waitForFunction(() => document.querySelector("#bench-status").textContent.includes("job 2): done"),
                             { timeout: 120000 });
  const benchRows = await page.$$eval("#bench-table tr", (rows) => rows.length - 1);
  if (benchRows !== 5) fail(`bench table has ${benchRows} rows, want 5 (1K to 256K by 4)`);
  const benchStatus = await text(page, "#bench-status");
  if (!benchStatus.includes("done")) fail(`bench status says '${benchStatus}'`);
  const ratios = await page.$$eval("#bench-table tr td:last-child", (cells) => cells.map((c) => c.textContent));
  if (!ratios.every((r) => r.endsWith("x"))) fail(`the bench table's ratios to the baseline: ${ratios}`);
  await shot(page, "bench");
  expectNoErrors(page, "Bench");
  log(`bench from the page: ${benchRows} sizes drawn beside the first sweep as baseline, ratios ${ratios.join(" ")} (${benchStatus})`);

  // The doctor from the page: the heatmap of every pair; a click on a cell
  // shows that pair's ops in the timeline.
  await page.goto(base + "#doctor");
  await page.$eval("#doctor-size", (n) => { n.value = "256K"; });
  await page.$eval("#doctor-iters", (n) => { n.value = "3"; });
  await page.click("#doctor-run");
  await page.waitForSelector("#heatmap rect.cell", { timeout: 180000 });
  const cells = await page.$$eval("#heatmap rect.cell", (nodes) => nodes.length);
  if (cells !== 12) fail(`heatmap has ${cells} cells, want 12 (4 ranks)`);
  await shot(page, "doctor");
  expectNoErrors(page, "Doctor");
  log(`doctor from the page: ${cells} cells; ${await text(page, "#findings")}`);
  await page.click('#heatmap rect.cell[data-src="1"][data-dst="2"]');
  await page.waitForSelector("#page-timeline:not([hidden])", { timeout: 10000 });
  await page.waitForFunction(() => Number(document.querySelector("#timeline").dataset.slices || 0) > 0,
                             { timeout: 60000 });
  const picked = await page.$$eval("#timeline rect.slice.picked", (nodes) => nodes.length);
  const filter = await text(page, "#timeline-filter");
  if (picked === 0) fail(`the timeline highlights none of the 1-2 pair's ops (${filter})`);
  await shot(page, "timeline");
  expectNoErrors(page, "Timeline");
  log(`cell 1->2 opens the timeline with ${picked} of the pair's ops highlighted`);

  // A planted divergence: a lone recv on rank 1 is highlighted on the Ops page.
  ccctlSync("tensor", "alloc", "lone", "--shape", "4");
  ccctlSync("--timeout", "120s", "recv", "--tensor", "lone", "--rank", "1", "--from", "0", "--async");
  await page.goto(base + "#ops");
  await page.waitForSelector('#ops-table td.diverge[data-rank="1"][data-state=running], #ops-table td.diverge[data-rank="1"][data-state=queued]',
                             { timeout: 20000 });
  const diagnosis = await text(page, "#diagnosis");
  if (!diagnosis.includes("1")) fail(`the diagnosis does not name rank 1: ${diagnosis}`);
  // The doctor's and the bench's ops of the last minute make a rate.
  const opsRate = Number(await text(page, "#ops-rate"));
  if (!(opsRate > 0)) fail(`the Ops page shows ${opsRate} ops/s after the bench and the doctor`);
  await shot(page, "ops");
  expectNoErrors(page, "Ops");
  log(`the lone recv is highlighted (${opsRate} ops/s over the last minute); diagnosis: ${diagnosis}`);

  // A worker killed with -9 shows as lost; its replacement brings the next
  // generation. A re-form mid-page leaves the page showing the world.
  await page.goto(base + "#world");
  const generationBefore = Number(await text(page, "#generation"));
  const victim = state.workers[3];
  const args = fs.readFileSync(`/proc/${victim}/cmdline`, "utf8").split("\0").filter(Boolean);
  const killedAt = Date.now();
  process.kill(victim, "SIGKILL");
  await page.waitForSelector('tr.member[data-rank="3"][data-answering=no]', { timeout: 30000 });
  const silentAfter = Date.now() - killedAt;
  log(`rank 3 shown not answering ${silentAfter} ms after kill -9`);
  await page.waitForSelector('tr.member[data-rank="3"][data-state=lost]', { timeout: 60000 });
  const lostAfter = Date.now() - killedAt;
  const world = JSON.parse(ccctlSync("status", "-o", "json"));
  log(`rank 3 shown lost ${lostAfter} ms after kill -9 (heartbeat every ${world.heartbeat_interval_ms} ms, lost after ${world.heartbeat_timeout_ms} ms)`);
  await shot(page, "world_lost");
  const replacementLog = fs.openSync(path.join(work, "replacement.log"), "w");
  const replacement = spawn(args[0], args.slice(1), { env, stdio: ["ignore", replacementLog, replacementLog] });
  children.push(replacement);
  await page.waitForFunction((before) =>
    Number(document.querySelector("#generation").textContent) > before &&
    document.querySelectorAll("tr.member[data-state=ready]").length === 4, { timeout: 90000 },
    generationBefore);
  const generationAfter = await text(page, "#generation");
  const generations = await page.$$eval("#generations li", (nodes) => nodes.length);
  if (generations < 2) fail(`the page lists ${generations} generations seen, want at least 2`);
  expectNoErrors(page, "World during the re-form");
  log(`the replacement joined: generation ${generationBefore} -> ${generationAfter}, 4 ranks ready`);

  // Bad input: no token, a wrong token, a viewer asking for a run, an
  // unreachable coordinator: a clear message on the page, never a blank page.
  const stranger = await openPage(undefined);
  await stranger.goto(base + "#world");
  await stranger.waitForSelector("#token-form:not([hidden])", { timeout: 10000 });
  await stranger.waitForFunction(() => document.querySelector("#banner").textContent.includes("viewer token"),
                                 { timeout: 10000 });
  await stranger.type("#token-input", "not-the-token");
  await stranger.click("#token-form button[type=submit]");
  await stranger.waitForFunction(() => !document.querySelector("#token-form").hidden === true,
                                 { timeout: 10000 });
  const strangerBanner = await text(stranger, "#banner");
  log(`without the token the page asks for it: '${strangerBanner}'`);
  await stranger.close();

  const viewer = await openPage(viewerToken);
  await viewer.goto(base + "#doctor");
  await viewer.waitForFunction(() => document.querySelector("#role").textContent === "viewer",
                               { timeout: 10000 });
  await viewer.click("#doctor-run");
  await viewer.waitForFunction(() => document.querySelector("#doctor-status").textContent.includes("operator token"),
                               { timeout: 10000 });
  log(`a viewer asking for the doctor: '${await text(viewer, "#doctor-status")}'`);
  await viewer.close();

  const lostHandle = startConsole(["--coordinator", "127.0.0.1:1"], "unreachable");
  const lostPort = await readPort(lostHandle);
  const unreachable = await openPage(undefined);
  await unreachable.goto(`http://127.0.0.1:${lostPort}/#world`);
  await unreachable.waitForFunction(() => document.querySelector("#banner").textContent.includes("UNAVAILABLE"),
                                    { timeout: 20000 });
  const unreachableBanner = await text(unreachable, "#banner");
  await shot(unreachable, "unreachable");
  const pageErrors = unreachable.errors.filter((e) => !e.includes("502"));
  if (pageErrors.length) fail(`unreachable coordinator: page errors ${pageErrors.join(" | ")}`);
  log(`an unreachable coordinator: '${unreachableBanner}'`);
  await unreachable.close();

  // The JSON endpoints a script reads.
  const served = await (await fetch(base + "api/world", { headers: { Authorization: "Bearer " + viewerToken } })).json();
  if (served.members.length !== 4) fail(`/api/world lists ${served.members.length} members`);
  const refused = await fetch(base + "api/world");
  if (refused.status !== 401) fail(`/api/world without a token answered ${refused.status}, want 401`);
  log("console_browser_test: PASS");
}

async function cleanUp() {
  if (browser) await browser.close().catch(() => {});
  for (const child of children) {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  try {
    ccctlSync("cluster", "down");
  } catch (error) {
    console.error(`cluster down: ${error.message}`);
  }
  fs.rmSync(work, { recursive: true, force: true });
}

let code = 0;
try {
  await main();
} catch (error) {
  console.error(`console_browser_test: FAIL: ${error.message}`);
  for (const file of fs.existsSync(work) ? fs.readdirSync(work) : []) {
    if (file.endsWith(".log")) console.error(`--- ${file}\n${fs.readFileSync(path.join(work, file), "utf8").slice(-3000)}`);
  }
  code = 1;
} finally {
  await cleanUp();
}
process.exit(code);
