// Lets @modelcontextprotocol/conformance start on Node 20: `node --import ./register.mjs ...`.
//
// The suite's bundle imports `globSync` from "fs" at its top level; Node added fs.globSync in
// 22, so on Node 20 the import fails before any scenario runs. The suite calls globSync only
// in `tier-check` (to gather checks.json files), never in `client`, `server` or `list`. A
// `--require` preload that adds the function to the fs object does not help: an ES module's
// named imports from a builtin are fixed when Node starts. So this registers a module resolve
// hook (node:module register, stable in Node 20.6+) that gives the suite's own modules an "fs"
// with every real export plus a globSync that says plainly it is unavailable. Nothing else is
// touched, and on a Node that has fs.globSync nothing is registered at all.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./hooks.mjs", import.meta.url);
}
