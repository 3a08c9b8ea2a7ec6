#include "viz/live_explorer.h"

#include "codec/settings_table.h"
#include "viz/run_panel.h"

namespace varrate::viz {

namespace {

// The settings a grid depends on: all but the budget (its axis) and the stage timing (changes no number).
bool same_grid_settings(const CodecSettings& a, const CodecSettings& b) {
    return setting_difference(a, b, SettingTier::Allocation).empty();
}

}  // namespace

LiveExplorer::LiveExplorer(RunPanel* panel, RunWorker* worker, QObject* parent)
    : QObject(parent), panel_(panel), worker_(worker) {
    rest_.setSingleShot(true);
    rest_.setInterval(500);
    connect(&rest_, &QTimer::timeout, this, &LiveExplorer::rested);
    connect(panel_, &RunPanel::live_settings_changed, this, &LiveExplorer::settings_changed);
    // Settings that are not live (methods, mode, questions, ...) say that they wait for a Run.
    connect(panel_, &RunPanel::settings_changed, this, [this] {
        if (active_) panel_->set_live(true, hint());
    });
    connect(panel_, &RunPanel::decode_requested, this, [this] {
        if (active_) decode_now();
    });
    connect(worker_, &RunWorker::live_updated, this, &LiveExplorer::set_outcome);
    connect(worker_, &RunWorker::rate_distortion_ready, this, [this](std::shared_ptr<const RateGrid> g) {
        grid_queued_ = false;
        if (!active_) return;
        grid_ = std::move(g);
        Q_EMIT grid_ready(grid_);
    });
}

void LiveExplorer::start(std::shared_ptr<const RunOutcome> outcome) {
    active_ = true;
    outcome_ = std::move(outcome);
    grid_.reset();
    grid_settings_.reset();
    grid_queued_ = false;
    panel_->set_live(true, hint());
    request_grid(grid_attention_);
    Q_EMIT state_changed();
}

void LiveExplorer::stop(const QString& why) {
    rest_.stop();
    active_ = false;
    grid_.reset();
    grid_settings_.reset();
    panel_->set_live(false, why);
    Q_EMIT state_changed();
}

void LiveExplorer::settings_changed() {
    if (!active_) return;
    update_now();
    if (auto_decode_) rest_.start();  // restarted by every step: fires once the controls rest
}

void LiveExplorer::update_now() {
    if (!active_) return;
    if (worker_->update_live(panel_->settings())) {
        ++updates_posted_;
        Q_EMIT job_posted(JobKind::Explore);
    }
}

void LiveExplorer::decode_now() {
    rest_.stop();
    if (!active_) return;
    worker_->decode_live();
    Q_EMIT job_posted(JobKind::Explore);
    const CodecSettings now = panel_->settings().codec;
    if (!grid_settings_ || !same_grid_settings(*grid_settings_, now)) request_grid(grid_attention_);
}

void LiveExplorer::rested() {
    if (!active_) return;
    decode_now();
}

void LiveExplorer::set_outcome(std::shared_ptr<const RunOutcome> outcome) {
    if (!active_) return;
    outcome_ = std::move(outcome);
    panel_->set_live(true, hint());
    Q_EMIT outcome_ready(outcome_);
    Q_EMIT state_changed();
}

void LiveExplorer::pin(std::shared_ptr<const RunOutcome> outcome) {
    if (!outcome) return;
    pinned_ = std::move(outcome);
    Q_EMIT pinned_changed();
}

void LiveExplorer::unpin() {
    if (!pinned_) return;
    pinned_.reset();
    Q_EMIT pinned_changed();
}

void LiveExplorer::request_grid(bool attention_output) {
    grid_attention_ = attention_output;
    if (!active_) return;
    const CodecSettings now = panel_->settings().codec;
    if (grid_ && grid_settings_ && same_grid_settings(*grid_settings_, now) &&
        (grid_->attention_output || !attention_output))
        return;  // what is shown already answers
    grid_settings_ = now;
    grid_queued_ = true;
    worker_->live_rate_distortion(default_budget_grid(), attention_output);
    Q_EMIT job_posted(JobKind::Explore);
}

QStringList LiveExplorer::waiting_for_run() const {
    QStringList out;
    if (!active_ || !outcome_) return out;
    const RunSettings now = panel_->settings();
    const CompareRequest& kept = outcome_->request;
    if (now.methods != kept.methods) out << "methods";
    if (now.mode != kept.mode) out << "mode";
    if (now.questions != kept.questions || now.answers != kept.answers ||
        now.answer_prefixes != kept.answer_prefixes)
        out << "questions";
    if (now.max_new_tokens != kept.max_new_tokens) out << "max new tokens";
    if (now.chat != kept.chat) out << "chat template";
    return out;
}

QString LiveExplorer::hint() const {
    if (!active_) return {};
    QString h =
        "<b>Live</b>: κ, r_min, R and coefficient bits re-allocate the kept run at once; stride, anchors, "
        "windows and pool re-analyse it (no prefill). Enter decodes the answers now.";
    if (outcome_ && outcome_->answers_stale) h += " <span style='color:#EBB839'>Answers are stale.</span>";
    const QStringList pending = waiting_for_run();
    if (!pending.isEmpty())
        h += " <span style='color:#EBB839'>Changed " + pending.join(", ") + ": press Run to apply.</span>";
    return h;
}

}  // namespace varrate::viz
