#pragma once
// Live exploration of the kept comparison: the run panel's codec settings drive the worker's LiveCompare.
// Every change re-allocates at once (coalesced on the worker: a drag runs as many updates as the worker can
// take, the last one always); the answers go stale and are decoded when the controls rest (about 500 ms) or
// at once on Enter; a rate-distortion grid follows the settings other than kappa. A pinned outcome is frozen
// for comparison with the live one. The window applies what comes out (outcome_ready, grid_ready); this
// object holds the exploration's state and timers and nothing about widgets beyond the run panel.
#include <QObject>
#include <QStringList>
#include <QTimer>

#include <memory>
#include <optional>
#include <vector>

#include "viz/run_worker.h"

namespace varrate::viz {

class RunPanel;

class LiveExplorer : public QObject {
    Q_OBJECT
  public:
    LiveExplorer(RunPanel* panel, RunWorker* worker, QObject* parent = nullptr);

    // A run finished (the worker keeps it): the controls become live and a grid is measured.
    void start(std::shared_ptr<const RunOutcome> outcome);
    // The kept run is gone (model changed, a run failed): the controls are plain settings again.
    void stop(const QString& why = {});
    bool active() const { return active_; }
    // Re-allocates at the panel's settings now (what the panel's change signal does).
    void update_now();
    // Decodes the answers of the current settings now (Enter; the rest timer does it too).
    void decode_now();
    // The outcome of the last update or decode (the window shows it).
    void set_outcome(std::shared_ptr<const RunOutcome> outcome);
    std::shared_ptr<const RunOutcome> outcome() const { return outcome_; }

    // Pin: an outcome (the one shown) frozen for comparison; unpin drops it.
    void pin(std::shared_ptr<const RunOutcome> outcome);
    void unpin();
    std::shared_ptr<const RunOutcome> pinned() const { return pinned_; }

    // The rate-distortion grid: attention_output measures each point's attention-output error too (a
    // reconstruction per point: seconds at long contexts, so only when the chart shows that measure).
    void request_grid(bool attention_output);
    std::shared_ptr<const RateGrid> grid() const { return grid_; }

    // Decoding when the controls rest (default on); the interaction benchmark turns it off to time drags.
    void set_auto_decode(bool on) { auto_decode_ = on; }
    int rest_ms() const { return rest_.interval(); }
    int64_t updates_posted() const { return updates_posted_; }
    // Panel settings that differ from the kept run and are not live: they apply on the next Run.
    QStringList waiting_for_run() const;

  Q_SIGNALS:
    void job_posted(varrate::viz::JobKind kind);  // the window tracks the worker's queue
    void outcome_ready(std::shared_ptr<const varrate::viz::RunOutcome> outcome);
    void grid_ready(std::shared_ptr<const varrate::viz::RateGrid> grid);
    void pinned_changed();
    void state_changed();  // active, stale answers or hints changed

  private:
    void settings_changed();
    void rested();
    QString hint() const;

    RunPanel* panel_;
    RunWorker* worker_;
    QTimer rest_;  // single shot: the controls rested
    bool active_ = false, auto_decode_ = true, grid_attention_ = false, grid_queued_ = false;
    std::shared_ptr<const RunOutcome> outcome_, pinned_;
    std::shared_ptr<const RateGrid> grid_;
    std::optional<CodecSettings> grid_settings_;  // of the grid requested last
    int64_t updates_posted_ = 0;
};

}  // namespace varrate::viz
