#!/usr/bin/env node
// The `webart` command: the built CLI (dist/cli.js).
import "../dist/cli.js";
