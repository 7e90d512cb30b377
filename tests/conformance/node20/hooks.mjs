// The resolve hook register.mjs installs: "fs" imported by the conformance suite's own files
// resolves to fs.mjs beside this file; every other import resolves as usual.
const SHIM = new URL("./fs.mjs", import.meta.url).href;
const SUITE = "/node_modules/@modelcontextprotocol/conformance/";

export async function resolve(specifier, context, nextResolve) {
  const parent = context.parentURL ?? "";
  if ((specifier === "fs" || specifier === "node:fs") && parent.includes(SUITE)) {
    return { url: SHIM, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
