#pragma once
// The one API the CLI and the desktop app share: a loaded model (+ tokenizer and codec basis) and the long
// jobs run on it — method comparison, perplexity, basis calibration. Every job takes progress and cancel
// callbacks and throws varrate::Error (bad input) or varrate::Cancelled; callers catch them once.
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codec/basis.h"
#include "codec/method.h"
#include "models/llama_model.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

// "" when `positions` fit the model's max_position_embeddings; else a warning naming both numbers and
// `what` spans them (e.g. "the scored text (600 tokens)"). Positions past the trained range make every
// method's output, the uncompressed one included, unreliable. Used by every command that runs a context.
std::string positions_warning(const ModelConfig& config, int64_t positions, const std::string& what);

// Where the VarRate/flat basis of a run comes from: the one the session opened with (given, or found beside
// the model; else each run self-calibrates), a basis file, or calibrated now on the run's context.
enum class BasisChoice { Shipped, File, CalibrateNow };
std::string to_string(BasisChoice b);  // "shipped", "file", "calibrate"
BasisChoice parse_basis_choice(const std::string& s);

// The basis file `varrate calibrate` and the app's "Calibrate on files..." write beside a model, and that
// Session::open picks up.
inline constexpr const char* kBasisFile = "varrate-basis.safetensors";

class Session {
  public:
    // Loads DIR's config, weights and tokenizer. `basis_file` empty: use DIR/varrate-basis.safetensors when
    // it exists, else calibrate on each context (results are then marked self-calibrated).
    static std::unique_ptr<Session> open(const std::filesystem::path& model_dir,
                                         const RuntimeOptions& runtime,
                                         const std::filesystem::path& basis_file = {},
                                         const JobControl& job = {});

    const LlamaModel& model() const { return *model_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const std::filesystem::path& model_dir() const { return model_dir_; }
    // Identity of the weights a basis belongs to (config + tensor names, shapes and leading bytes).
    const std::string& fingerprint() const { return fingerprint_; }
    // The basis given or found beside the model; null when every run self-calibrates.
    std::shared_ptr<const Basis> basis() const { return basis_; }
    std::string basis_source() const { return basis_source_; }
    // The codec settings recorded beside the model (varrate-codec.json, over the width-based defaults), if
    // any; default_codec_settings() is what runs start from either way.
    const std::optional<CodecSettings>& codec_defaults() const { return codec_defaults_; }
    CodecSettings default_codec_settings() const;
    void set_basis(std::shared_ptr<const Basis> basis, const std::string& source);

    // The basis open() found (given or beside the model) and where from; null when runs self-calibrate.
    std::shared_ptr<const Basis> shipped_basis() const { return shipped_basis_; }
    const std::string& shipped_source() const { return shipped_source_; }
    // Makes `basis` the session's shipped basis and its current one (e.g. just calibrated and saved).
    void set_shipped_basis(std::shared_ptr<const Basis> basis, const std::string& source);
    // Loads a basis file and checks it belongs to this model (fingerprint, D, layer count); throws Error
    // naming the file.
    std::shared_ptr<const Basis> load_basis(const std::filesystem::path& file) const;
    // Puts the basis a run asks for in place. File: `file` (required). CalibrateNow: calibrated on
    // `context_ids` (self-calibrated), or, without a context (a NIAH sweep: every document differs), none,
    // so that each run calibrates on its own context.
    void select_basis(BasisChoice choice, const std::filesystem::path& file,
                      const std::vector<int64_t>& context_ids, const CodecSettings& settings,
                      const JobControl& job = {});

    // D = 2 * n_kv_head * head_dim.
    int64_t joint_dim() const;
    // Checks a basis against this model and the codec settings (stride, anchors, D, rank rows).
    void check_basis(const Basis& basis, const CodecSettings& settings, const std::string& where) const;

    // Calibration texts from files: each tokenized (with BOS), cut to `max_tokens`, and long enough to hold
    // residuals (more than the window plus two strides); throws Error naming the file otherwise.
    std::vector<std::vector<int64_t>> calibration_texts(const std::vector<std::filesystem::path>& files,
                                                        const CodecSettings& settings,
                                                        int64_t max_tokens) const;
    // Prefills each text (already tokenized) and accumulates anchor residuals of every layer into a basis.
    Basis calibrate(const std::vector<std::vector<int64_t>>& texts, const CodecSettings& settings,
                    int64_t rank, bool self_calibrated, const JobControl& job = {}) const;

    // The basis a run with `settings` should use for `context_ids`: the session's (checked), or one
    // calibrated on the context itself (marked self-calibrated: a per-sequence oracle whose R x D bytes
    // the codec charges to the budget, see codec/footprint.h).
    std::shared_ptr<const Basis> basis_for(const std::vector<int64_t>& context_ids,
                                           const CodecSettings& settings, const JobControl& job = {}) const;

  private:
    Session() = default;
    std::filesystem::path model_dir_;
    std::unique_ptr<LlamaModel> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::string fingerprint_;
    std::shared_ptr<const Basis> basis_, shipped_basis_;
    std::string basis_source_, shipped_source_;
    std::optional<CodecSettings> codec_defaults_;
};

}  // namespace varrate
