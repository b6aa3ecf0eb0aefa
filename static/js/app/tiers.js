// The tier picker beside the composer: "Auto" (pre-processing chooses) or one of the tiers
// the user's role in the chat's instance may ask for (config.instances[].tiers, the same
// limits pre-processing enforces). The choice goes out as message.send overrides.tier.
import { $, el } from "./dom.js";

const NAMES = { fast: "Fast", standard: "Standard", heavy: "Heavy" };

// instance: an entry of config.instances ({tiers: [{tier, modelLabel}]}), or undefined.
// Keeps the current choice when the instance offers it, else goes back to Auto.
export function showTiers(instance) {
  const picker = $("tier-picker");
  const tiers = (instance && instance.tiers) || [];
  const chosen = picker.value;
  picker.replaceChildren(
    el("option", { value: "" }, "Auto"),
    ...tiers.map(({ tier, modelLabel }) => el("option", { value: tier, title: modelLabel }, NAMES[tier] || tier)),
  );
  picker.value = tiers.some(({ tier }) => tier === chosen) ? chosen : "";
  picker.hidden = !tiers.length;
}

// The chosen tier, or null for Auto.
export function chosenTier() {
  return $("tier-picker").value || null;
}
