//! Named NF counters: one definition gives the struct, the listing by name that
//! reports read, and the field-by-field sum that merges cores — so a counter can
//! never be added to one and forgotten in the others.

/// Defines a counters struct of `u64` fields with `list()` and `add()`.
macro_rules! counters {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            /// Every counter with its name, in declaration order.
            pub fn list(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }

            /// Adds another core's counters.
            pub fn add(&mut self, o: &Self) {
                $(self.$field += o.$field;)*
            }
        }
    };
}

/// The [`Nf`](crate::Nf) methods of an NF whose per-core state is its
/// `counters` field alone (a counters struct of [`counters!`]): listed, zeroed
/// in a fresh instance for another core, summed when cores merge.
macro_rules! counted_nf {
    ($ty:ty) => {
        fn counters(&self) -> Vec<(&'static str, u64)> {
            self.counters.list()
        }

        fn instance(&self) -> Box<dyn crate::Nf> {
            let mut n = self.clone();
            n.counters = Default::default();
            Box::new(n)
        }

        fn merge_from(&mut self, other: &dyn crate::Nf) {
            if let Some(o) = other.as_any().downcast_ref::<$ty>() {
                self.counters.add(&o.counters);
            }
        }
    };
}

/// Adds `more` to `to` by name: a name `to` has gets the sum, a new one is
/// appended (an NF's own counters with those of a component it shares).
pub(crate) fn add_named(to: &mut Vec<(&'static str, u64)>, more: Vec<(&'static str, u64)>) {
    for (name, n) in more {
        match to.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => *v += n,
            None => to.push((name, n)),
        }
    }
}
