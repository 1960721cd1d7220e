//! A trace spec's numbers have bounds with errors naming the field: random
//! integers never panic, and a small accepted spec generates what it says.

use proptest::prelude::*;
use trace::{Generator, TraceSpec, MAX_FLOWS};

fn int() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..40_000,
        (0u32..64).prop_map(|k| 1u64 << k),
        any::<u64>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn any_numbers_are_an_error_naming_the_field_or_a_trace(
        flows in int(), packets in int(), active in int(), dscp in any::<u8>(),
        alpha in prop_oneof![0.0f64..=2.0, any::<f64>()],
    ) {
        let spec = TraceSpec {
            flows: flows.min(u64::from(u32::MAX)) as u32,
            packets,
            active_flows: active.min(u64::from(u32::MAX)) as u32,
            priority_dscp: dscp,
            alpha,
            ..TraceSpec::default()
        };
        match spec.validate() {
            Err(e) => {
                let e = e.to_string();
                let fields = ["flows", "packets", "active_flows", "priority_dscp", "alpha"];
                prop_assert!(fields.iter().any(|f| e.contains(&format!("`{f}`"))), "{e}");
            }
            Ok(()) => {
                prop_assert!(spec.flows <= MAX_FLOWS);
                if spec.packets <= 40_000 && spec.flows <= 5_000 {
                    let n = Generator::new(&spec).unwrap().count() as u64;
                    prop_assert_eq!(n, spec.packets);
                }
            }
        }
    }
}
