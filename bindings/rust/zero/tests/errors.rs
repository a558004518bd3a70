//! Failures come back as `Err` with the C status and a message that names
//! the problem (for configs: the key path).
use zero::{Communicator, Config, DType, Engine, ParamDesc, Status};

fn engine_error(config: &Config) -> zero::Error {
    let comm = Communicator::new_self().unwrap();
    Engine::new(config, &comm).expect_err("config should be rejected")
}

#[test]
fn unknown_config_key_error_names_the_key_path() {
    let config = Config::from_json(
        r#"{"train_batch_size": 4, "zero_optimization": {"stage": 2, "no_such_key": 1}}"#,
    )
    .unwrap();
    let err = engine_error(&config);
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(
        err.message().contains("zero_optimization.no_such_key"),
        "{err}"
    );
}

#[test]
fn out_of_range_config_value_error_names_the_key_path() {
    let config =
        Config::from_json(r#"{"train_batch_size": 4, "zero_optimization": {"stage": 4}}"#).unwrap();
    let err = engine_error(&config);
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("zero_optimization.stage"), "{err}");
}

#[test]
fn wrong_type_in_config_file_error_names_the_key_path() {
    let path = std::env::temp_dir().join(format!("zero_rs_bad_config_{}.json", std::process::id()));
    std::fs::write(
        &path,
        r#"{"train_batch_size": 4, "optimizer": {"type": "Adam", "params": {"lr": "fast"}}}"#,
    )
    .unwrap();
    let config = Config::from_file(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let err = engine_error(&config);
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("optimizer.params.lr"), "{err}");
}

#[test]
fn builder_stage_out_of_range_is_invalid_argument() {
    let err = engine_error(&Config::builder().stage(7).build());
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("stage"), "{err}");
}

#[test]
fn error_display_has_status_and_message() {
    let err = engine_error(&Config::builder().stage(7).build());
    let text = err.to_string();
    assert!(text.contains(err.message()), "{text}");
    assert_eq!(err.code(), Status::InvalidArgument.code());
}

#[test]
fn unknown_param_name_is_not_found() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&Config::builder().build(), &comm).unwrap();
    engine.register_param(ParamDesc::new("w", &[2])).unwrap();
    engine.finalize().unwrap();
    let err = engine.find_param("missing").unwrap_err();
    assert_eq!(err.status(), Status::NotFound);
    assert!(err.message().contains("missing"), "{err}");
}

#[test]
fn init_of_wrong_length_is_rejected_before_the_call() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&Config::builder().build(), &comm).unwrap();
    let err = engine
        .register_param(ParamDesc::new("w", &[2, 3]).init(&[1.0; 5]))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("'w'"), "{err}");
}

#[test]
fn trainable_param_of_other_dtype_is_invalid_argument() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&Config::builder().build(), &comm).unwrap();
    let err = engine
        .register_param(ParamDesc::new("w", &[4]).dtype(DType::F16))
        .unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("'w'"), "{err}");
}

#[test]
fn step_before_finalize_is_failed_precondition() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&Config::builder().build(), &comm).unwrap();
    engine.register_param(ParamDesc::new("w", &[2])).unwrap();
    let err = engine.step().unwrap_err();
    assert_eq!(err.status(), Status::FailedPrecondition);
}

#[test]
fn register_after_finalize_is_failed_precondition() {
    let comm = Communicator::new_self().unwrap();
    let mut engine = Engine::new(&Config::builder().build(), &comm).unwrap();
    engine.register_param(ParamDesc::new("w", &[2])).unwrap();
    engine.finalize().unwrap();
    let err = engine
        .register_param(ParamDesc::new("v", &[2]))
        .unwrap_err();
    assert_eq!(err.status(), Status::FailedPrecondition);
}
