// ESLint flat config: the recommended JS and typescript-eslint rules.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: [
      "node_modules",
      "dist",
      "packages/*/dist",
      ".cache",
      ".tsbuild",
      ".devbundle",
      ".gl",
      "test-results",
      "playwright-report",
      "bench/results",
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // Node scripts (.mjs) run in Node: its globals are defined.
  {
    files: ["**/*.mjs"],
    languageOptions: {
      globals: {
        process: "readonly",
        console: "readonly",
        URL: "readonly",
        Buffer: "readonly",
        setTimeout: "readonly",
        performance: "readonly",
      },
    },
  },
  // The consumer check's browser app: a page and a module worker.
  {
    files: ["e2e/consumer/app/**/*.js"],
    languageOptions: {
      globals: { document: "readonly", Worker: "readonly", URL: "readonly", postMessage: "readonly" },
    },
  },
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
);
