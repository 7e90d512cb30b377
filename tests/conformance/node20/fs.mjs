// node:fs as it is, plus the globSync Node 20 lacks: it fails with a clear message if called.
import fs from "node:fs";

export * from "node:fs";
export default fs;

export function globSync() {
  throw new Error("fs.globSync needs Node 22 or later (only the suite's tier-check command uses it)");
}
