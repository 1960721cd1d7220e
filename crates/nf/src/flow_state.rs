//! The state NFs keep in flowshift's tables: [`FlowState`] in a flow entry's
//! slots, [`ShardLocal`] per shard (it moves with the shard), one variant per
//! NF kind (`kinds`).

macro_rules! flow_states {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $name:literal: $section:ty
        $(, flow $fv:ident($ft:ty))?
        $(, local $lv:ident($lt:ty))?
        ;
    )*) => {
        /// The per-flow state an NF keeps in its slot of a flow entry, one
        /// variant per NF kind with per-flow state.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum FlowState {
            $($(
                #[doc = concat!("The per-flow state of the `", $name, "` NF.")]
                $fv($ft),
            )?)*
        }

        /// Each NF's own words for its state (`state_text`).
        impl std::fmt::Display for FlowState {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $($(FlowState::$fv(s) => std::fmt::Display::fmt(s, f),)?)*
                }
            }
        }

        /// State an NF keeps per shard, outside flow entries: it moves with the
        /// shard.
        #[derive(Debug, Default)]
        pub enum ShardLocal {
            /// Nothing.
            #[default]
            None,
            $($(
                #[doc = concat!("The shard-local state of the `", $name, "` NF.")]
                $lv($lt),
            )?)*
        }
    };
}

with_nf_kinds!(flow_states);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_any_state_in_24_bytes() {
        // a flow entry's slots are as large as the largest state: with two
        // NFs, one cache line holds both slots and their deadlines
        assert!(core::mem::size_of::<Option<FlowState>>() <= 24);
    }
}
