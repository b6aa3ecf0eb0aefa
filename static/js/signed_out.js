// The sign-in page: no session, so no key remembered on this device stays usable
// (docs/crypto.md §2, "Remember this device").
import { forgetAllDevices } from "./app/device.js";

forgetAllDevices().catch(() => {});
