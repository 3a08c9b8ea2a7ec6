#pragma once
// The codec's settings in one table: for each CodecSettings field its JSON key, CLI flag, Run-panel label,
// help, allowed values, default source and tier. The CLI options, the app's Run panel, the JSON form
// (codec_json), a model's varrate-codec.json, the live explorer's update cost, sweep identities and session
// files are all made from it, so a new setting is one field and one row. The word in code is "budget"
// (kappa is its symbol in the paper and in labels).
#include <cstdint>
#include <string>
#include <vector>

#include "codec/method.h"

namespace varrate {

enum class SettingKind {
    Fraction,  // a double in (min, max]
    Integer,   // an integer in [min, max]
    Choice,    // one of `choices`
    Flag,      // true or false
    List,      // numbers in (min, max], one per layer, or none (written comma-separated; JSON: an array)
};

// What changing a setting costs a kept capture, cheapest first; each tier includes the ones below it.
enum class SettingTier {
    Runtime,     // changes no number (stage timing)
    Budget,      // kappa itself: a new allocation on the same analyses, and the axis sweeps vary
    Allocation,  // allocate() reads it: a new allocation on the same analyses (r_min, coefficient bits)
    Analysis,    // the analyses are kept per value (R, paper accounting): every method analyses again
    Structural,  // analyse() reads it and allocate() must be given the method's (stride, c, w, w_obs, pool)
};

struct CodecSettingSpec {
    const char* key = "";    // JSON key (the CodecSettings field's name)
    const char* flag = "";   // CLI flag
    const char* label = "";  // Run panel row
    const char* help = "";   // CLI help and tooltip
    SettingKind kind = SettingKind::Integer;
    SettingTier tier = SettingTier::Structural;
    double min = 0, max = 0;       // Fraction: (min, max]; Integer: [min, max]
    std::vector<int64_t> choices;  // Choice
    // A model's defaults set it (core/codec_defaults.h: width-based or varrate-codec.json); otherwise it is a
    // regime the user picks, kept across models.
    bool model_default = false;
    bool slider = false;       // the Run panel pairs its box with a slider (the settings explored live)
    bool dim_bounded = false;  // a rank: its slider spans 0..D of the loaded model
    // A self-calibrated basis is fitted on residuals that depend on it: a change fits the basis again.
    bool shapes_basis = false;
    // Written to JSON only when it differs from the default, so that settings, sweep identities and
    // references made before the row existed read the same.
    bool omit_default = false;
    double CodecSettings::*real = nullptr;
    int64_t CodecSettings::*integer = nullptr;
    bool CodecSettings::*boolean = nullptr;
    std::vector<double> CodecSettings::*list = nullptr;
};

// Every row, in the order the CLI help and the Run panel show them.
const std::vector<CodecSettingSpec>& codec_setting_specs();
// The row of a JSON key; null when there is none.
const CodecSettingSpec* find_codec_setting(const std::string& key);

// The field's value as a number (a flag: 0 or 1) and the inverse (unchecked: see check_setting). A List row
// has no single value: both throw Error for one (same_setting, format_setting and parse_setting_list serve
// every kind).
double setting_value(const CodecSettingSpec& spec, const CodecSettings& s);
void set_setting_value(const CodecSettingSpec& spec, CodecSettings& s, double value);
// Whether a and b hold the same value of the row (any kind).
bool same_setting(const CodecSettingSpec& spec, const CodecSettings& a, const CodecSettings& b);
// A List row's value from its text ("0.75,0.25,0.5"; "" for none), every entry checked: throws Error
// "<where>: "<key>" entry 2 must be a number in (0, 1], got x".
std::vector<double> parse_setting_list(const CodecSettingSpec& spec, const std::string& text,
                                       const std::string& where);
// "" when `value` is allowed, else what is allowed ("an integer >= 1", "2, 3, 4, 8 or 16", ...).
std::string setting_violation(const CodecSettingSpec& spec, double value);
// The one range check: throws Error "<where>: <key> must be <allowed>, got <value>".
void check_setting(const CodecSettingSpec& spec, double value, const std::string& where);
// The budget's check, the one every method and command runs: throws Error "<where>: "budget" must be a number
// in (0, 1], got 1.5" (then "; <hint>" when a hint is given, e.g. the smallest feasible kappa).
void check_budget(double budget, const std::string& where, const std::string& hint = "");
// Every field checked; throws as check_setting.
void check_codec_settings(const CodecSettings& s, const std::string& where);
// "0.2", "16", "true", "0.75,0.25": the value as the CLI writes it (JSON: the same number, or an array).
std::string format_setting(const CodecSettingSpec& spec, const CodecSettings& s);

// The first row of tier >= `from` where a and b differ, as "stride 16 vs 32"; "" when none.
std::string setting_difference(const CodecSettings& a, const CodecSettings& b, SettingTier from);
// The cheapest update that takes `a` to `b`: the highest tier of the rows that differ; Runtime when none do.
SettingTier update_tier(const CodecSettings& a, const CodecSettings& b);

// The budgets a rate-distortion sweep visits by default (`varrate rd`, the app's live curves): 0.02 ... 0.75.
const std::vector<double>& default_budget_grid();

}  // namespace varrate
