//! PLACEHOLDER: the mock registry lands here.
