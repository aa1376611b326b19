use super::*;

#[test]
fn samples_fall_into_the_bucket_of_the_first_bound_not_below_them() {
    let mut b = Buckets::<3>::default();
    let bounds = [1.0, 10.0, 100.0];
    for v in [0.5, 1.0, 1.5, 10.0, 99.0, 1000.0] {
        b.record(&bounds, v);
    }
    assert_eq!(b.counts, [2, 2, 1]);
    assert_eq!(b.count, 6);
    assert_eq!(b.sum, 1112.0);
}

#[test]
fn a_series_is_written_cumulative_as_prometheus_reads_it() {
    let mut b = Buckets::<3>::default();
    let bounds = [1.0, 10.0, 100.0];
    for v in [0.5, 5.0, 5.0, 500.0] {
        b.record(&bounds, v);
    }
    let mut out = String::new();
    b.write(&mut out, "m", "type=\"eds\"", &bounds);
    assert_eq!(
        out,
        "m_bucket{type=\"eds\",le=\"1\"} 1\n\
         m_bucket{type=\"eds\",le=\"10\"} 3\n\
         m_bucket{type=\"eds\",le=\"100\"} 3\n\
         m_bucket{type=\"eds\",le=\"+Inf\"} 4\n\
         m_sum{type=\"eds\"} 510.5\n\
         m_count{type=\"eds\"} 4\n"
    );
    let mut out = String::new();
    b.write(&mut out, "m", "", &bounds);
    assert!(out.starts_with("m_bucket{le=\"1\"} 1\n"), "{out}");
    assert!(out.ends_with("m_sum 510.5\nm_count 4\n"), "{out}");
}

/// Sizes above the largest bound: no test sends a 40 MB response, so only this test's pushes
/// land there, whatever other tests of the process push meanwhile.
fn oversized(ty: ResourceType) -> u64 {
    let b = &sum().size[ty.index()];
    b.count - b.counts.iter().sum::<u64>()
}

#[test]
fn counts_of_threads_that_exited_stay_in_the_sum() {
    let ty = ResourceType::WorkloadEntry;
    let before = oversized(ty);
    let big = 50_000_000;
    let threads: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(move || pushed(ty, big, Duration::from_millis(1))))
        .collect();
    for t in threads {
        t.join().expect("the recording thread ends");
    }
    pushed(ty, big, Duration::from_millis(1));
    assert_eq!(oversized(ty), before + 4);
    let live = TALLIES.lock().live.len();
    assert!(live < 64, "exited threads leave the list ({live} left)");
}

#[test]
fn rendered_families_carry_help_type_and_istiods_labels() {
    pushed(ResourceType::Cluster, 2_000, Duration::from_millis(3));
    converged(Duration::from_millis(40));
    let mut out = String::new();
    render(&mut out);
    for (family, kind) in [
        ("pilot_xds_pushes", "counter"),
        ("pilot_xds_config_size_bytes", "histogram"),
        ("pilot_xds_push_time", "histogram"),
        ("pilot_proxy_convergence_time", "histogram"),
    ] {
        assert!(
            out.contains(&format!("# HELP {family} ")),
            "{family}: {out}"
        );
        assert!(
            out.contains(&format!("# TYPE {family} {kind}\n")),
            "{family}: {out}"
        );
    }
    assert!(out.contains("\npilot_xds_pushes{type=\"cds\"} "), "{out}");
    assert!(out.contains("\npilot_xds_config_size_bytes_bucket{type=\"cds\",le=\"10000\"} "));
    assert!(out.contains("\npilot_xds_push_time_bucket{type=\"cds\",le=\"0.01\"} "));
    assert!(out.contains("\npilot_proxy_convergence_time_bucket{le=\"0.1\"} "));
}
