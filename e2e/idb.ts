// Reading what the app saved in the page's IndexedDB, for the end-to-end tests.
import type { Page } from "@playwright/test";

/** A run file the app keeps in IndexedDB's "runs" store (e.g. `web/models/NAME/history.jsonl`), as text. */
export const readRunFile = (page: Page, key: string): Promise<string> =>
  page.evaluate(
    (k) =>
      new Promise<string>((resolve, reject) => {
        const open = indexedDB.open("webart");
        open.onerror = () => reject(open.error);
        open.onsuccess = () => {
          const get = open.result.transaction("runs").objectStore("runs").get(k);
          get.onsuccess = () => resolve(new TextDecoder().decode(get.result as Uint8Array));
          get.onerror = () => reject(get.error);
        };
      }),
    key,
  );
