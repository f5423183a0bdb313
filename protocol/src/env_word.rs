//! A setting that travels to the recorder as one word of an environment variable: the CLI
//! writes each value as its word (`env_value`) and the recorder reads the word back
//! (`from_env`). Both directions come from one table per setting, so they cannot drift apart.

/// Gives a fieldless enum `env_value` and `from_env` from its table of words:
/// `env_words!(Type, "KREPLAY_VAR", { Variant => "word", ... });`.
macro_rules! env_words {
    ($ty:ident, $var:literal, { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            #[doc = concat!("The value of `", $var, "`.")]
            pub fn env_value(self) -> &'static str {
                match self {
                    $($ty::$variant => $word,)+
                }
            }

            #[doc = concat!("The setting a value of `", $var, "` names; `None` for another word.")]
            pub fn from_env(v: &str) -> Option<$ty> {
                match v {
                    $($word => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use env_words;

#[cfg(test)]
mod tests {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Shade {
        Light,
        Dark,
    }

    env_words!(Shade, "KREPLAY_SHADE", { Light => "light", Dark => "dark" });

    #[test]
    fn each_value_reads_back_from_its_word_and_other_words_name_none() {
        for s in [Shade::Light, Shade::Dark] {
            assert_eq!(Shade::from_env(s.env_value()), Some(s));
        }
        assert_eq!(Shade::Dark.env_value(), "dark");
        for other in ["", "Dark", "dark ", "grey"] {
            assert_eq!(Shade::from_env(other), None, "{other:?}");
        }
    }
}
