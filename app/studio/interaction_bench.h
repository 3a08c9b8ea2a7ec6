#pragma once
// Interaction latency of the desktop app on a real run (`varrate-studio --bench-interaction`): the main
// window loads a model through its worker (the same session API as every run), generates a NIAH document of
// the requested length, runs the default method comparison, and then times what a user does with the views —
// hover and scroll in the document view, repaints of the position charts and the rank heatmap zoomed out and
// zoomed in, wheel zoom and cursor moves across the linked views, switching method, metric and layer, and a
// grab of the whole window. Every timed event is delivered synchronously and the repaints it causes are
// flushed inside the timed region, so a latency includes the paint. Reports median, p95 and max per kind.
#include <QSize>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace varrate::viz {

struct InteractionBenchOptions {
    QString model_dir;
    int64_t tokens = 32768;  // requested context length; clamped to what the model's positions allow
    int repeats = 50;        // timed events per interaction kind
    int warmup = 5;          // untimed events of the same kind before them
    QSize window_size{1600, 1000};
    uint64_t seed = 1;                        // of the pseudo-random positions
    QString settings_file;                    // ini of the window; "" = a scratch file in the temp directory
    int job_timeout_s = 0;                    // limit for each job (load, document, run); 0 = none
    std::function<void(const QString&)> log;  // progress lines (stage, elapsed time)
};

struct InteractionStats {
    QString kind;         // e.g. "hover_document"
    QString description;  // what one event does
    std::vector<double> ms;
    double median_ms = 0, p95_ms = 0, max_ms = 0, mean_ms = 0;
    double paints_per_event = 0;  // paint events of the app's views per timed event
};

// Where the run's time went, per method (as core/compare.h measures it).
struct MethodTiming {
    QString method;
    double prefill_ms = 0, compress_ms = 0;
};

struct InteractionBenchReport {
    QString model_dir, model_name, platform, device, dtype;
    int64_t requested_tokens = 0, tokens = 0, layers = 0, joint_dim = 0;
    QStringList methods;
    QSize window_size, document_viewport, chart_size, heatmap_size;
    double load_s = 0;       // model load, as the worker measured it
    double document_s = 0;   // NIAH document generation (wall)
    double run_wall_s = 0;   // the comparison run, as the worker measured it
    double run_total_s = 0;  // from Run to results shown in the views (wall)
    std::vector<MethodTiming> method_timings;
    int repeats = 0, warmup = 0;
    std::vector<InteractionStats> interactions;
};

// Throws varrate::Error when the model cannot be loaded, the run fails or a job exceeds its time limit.
// Needs a QApplication; runs its own event loops while the jobs run.
InteractionBenchReport run_interaction_bench(const InteractionBenchOptions& options);

// Nearest-rank percentile (0..100) of unsorted values; 0 for none.
double percentile_ms(std::vector<double> values, double percent);

nlohmann::json to_json(const InteractionBenchReport& report);
// A short fixed-width table: one row per interaction kind, then the run's sizes and times.
QString format_table(const InteractionBenchReport& report);
// Writes to_json(report) atomically; throws Error naming the file.
void write_report(const InteractionBenchReport& report, const QString& path);

}  // namespace varrate::viz
