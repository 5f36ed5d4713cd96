-- Secondary indexes of the tables in 1.4.3/tables.sql, as Arvados 1.4.3 defines them
-- (services/api/db/structure.sql at the tag 1.4.3). Only CREATE INDEX statements, one per
-- line, as in ../indexes.sql. Jobs' text search is jobs_full_text_search_idx (to_tsvector
-- over substr(<22 columns>, 0, 1000000)): no pg_trgm.

-- users
CREATE INDEX index_users_on_created_at ON public.users USING btree (created_at);
CREATE INDEX index_users_on_modified_at ON public.users USING btree (modified_at);
CREATE INDEX index_users_on_modified_at_uuid ON public.users USING btree (modified_at DESC, uuid);
CREATE INDEX index_users_on_owner_uuid ON public.users USING btree (owner_uuid);
CREATE UNIQUE INDEX index_users_on_username ON public.users USING btree (username);
CREATE UNIQUE INDEX index_users_on_uuid ON public.users USING btree (uuid);
CREATE INDEX users_search_index ON public.users USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, email, first_name, last_name, identity_url, default_owner_uuid, username, redirect_to_user_uuid);

-- api_client_authorizations
CREATE INDEX api_client_authorizations_search_index ON public.api_client_authorizations USING btree (api_token, created_by_ip_address, last_used_by_ip_address, default_owner_uuid, uuid);
CREATE INDEX index_api_client_authorizations_on_api_client_id ON public.api_client_authorizations USING btree (api_client_id);
CREATE UNIQUE INDEX index_api_client_authorizations_on_api_token ON public.api_client_authorizations USING btree (api_token);
CREATE INDEX index_api_client_authorizations_on_expires_at ON public.api_client_authorizations USING btree (expires_at);
CREATE INDEX index_api_client_authorizations_on_user_id ON public.api_client_authorizations USING btree (user_id);
CREATE UNIQUE INDEX index_api_client_authorizations_on_uuid ON public.api_client_authorizations USING btree (uuid);

-- jobs
CREATE INDEX index_jobs_on_created_at ON public.jobs USING btree (created_at);
CREATE INDEX index_jobs_on_finished_at ON public.jobs USING btree (finished_at);
CREATE INDEX index_jobs_on_modified_at ON public.jobs USING btree (modified_at);
CREATE INDEX index_jobs_on_modified_at_uuid ON public.jobs USING btree (modified_at DESC, uuid);
CREATE INDEX index_jobs_on_output ON public.jobs USING btree (output);
CREATE INDEX index_jobs_on_owner_uuid ON public.jobs USING btree (owner_uuid);
CREATE INDEX index_jobs_on_script ON public.jobs USING btree (script);
CREATE INDEX index_jobs_on_script_parameters_digest ON public.jobs USING btree (script_parameters_digest);
CREATE INDEX index_jobs_on_started_at ON public.jobs USING btree (started_at);
CREATE UNIQUE INDEX index_jobs_on_submit_id ON public.jobs USING btree (submit_id);
CREATE UNIQUE INDEX index_jobs_on_uuid ON public.jobs USING btree (uuid);
CREATE INDEX jobs_full_text_search_idx ON public.jobs USING gin (to_tsvector('english'::regconfig, substr((((((((((((((((((((((((((((((((((((((((((((COALESCE(uuid, ''::character varying))::text || ' '::text) || (COALESCE(owner_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(modified_by_client_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(modified_by_user_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(submit_id, ''::character varying))::text) || ' '::text) || (COALESCE(script, ''::character varying))::text) || ' '::text) || (COALESCE(script_version, ''::character varying))::text) || ' '::text) || COALESCE(script_parameters, ''::text)) || ' '::text) || (COALESCE(cancelled_by_client_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(cancelled_by_user_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(output, ''::character varying))::text) || ' '::text) || (COALESCE(is_locked_by_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(log, ''::character varying))::text) || ' '::text) || COALESCE(tasks_summary, ''::text)) || ' '::text) || COALESCE(runtime_constraints, ''::text)) || ' '::text) || (COALESCE(repository, ''::character varying))::text) || ' '::text) || (COALESCE(supplied_script_version, ''::character varying))::text) || ' '::text) || (COALESCE(docker_image_locator, ''::character varying))::text) || ' '::text) || (COALESCE(description, ''::character varying))::text) || ' '::text) || (COALESCE(state, ''::character varying))::text) || ' '::text) || (COALESCE(arvados_sdk_version, ''::character varying))::text) || ' '::text) || COALESCE(components, ''::text)), 0, 1000000)));
CREATE INDEX jobs_search_index ON public.jobs USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, submit_id, script, script_version, cancelled_by_client_uuid, cancelled_by_user_uuid, output, is_locked_by_uuid, log, repository, supplied_script_version, docker_image_locator, state, arvados_sdk_version);

-- job_tasks
CREATE INDEX index_job_tasks_on_created_at ON public.job_tasks USING btree (created_at);
CREATE INDEX index_job_tasks_on_created_by_job_task_uuid ON public.job_tasks USING btree (created_by_job_task_uuid);
CREATE INDEX index_job_tasks_on_job_uuid ON public.job_tasks USING btree (job_uuid);
CREATE INDEX index_job_tasks_on_modified_at ON public.job_tasks USING btree (modified_at);
CREATE INDEX index_job_tasks_on_owner_uuid ON public.job_tasks USING btree (owner_uuid);
CREATE INDEX index_job_tasks_on_sequence ON public.job_tasks USING btree (sequence);
CREATE INDEX index_job_tasks_on_success ON public.job_tasks USING btree (success);
CREATE UNIQUE INDEX index_job_tasks_on_uuid ON public.job_tasks USING btree (uuid);
CREATE INDEX job_tasks_search_index ON public.job_tasks USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, job_uuid, created_by_job_task_uuid);

-- logs
CREATE INDEX index_logs_on_created_at ON public.logs USING btree (created_at);
CREATE INDEX index_logs_on_event_at ON public.logs USING btree (event_at);
CREATE INDEX index_logs_on_event_type ON public.logs USING btree (event_type);
CREATE INDEX index_logs_on_modified_at ON public.logs USING btree (modified_at);
CREATE INDEX index_logs_on_modified_at_uuid ON public.logs USING btree (modified_at DESC, uuid);
CREATE INDEX index_logs_on_object_owner_uuid ON public.logs USING btree (object_owner_uuid);
CREATE INDEX index_logs_on_object_uuid ON public.logs USING btree (object_uuid);
CREATE INDEX index_logs_on_owner_uuid ON public.logs USING btree (owner_uuid);
CREATE INDEX index_logs_on_summary ON public.logs USING btree (summary);
CREATE UNIQUE INDEX index_logs_on_uuid ON public.logs USING btree (uuid);
CREATE INDEX logs_search_index ON public.logs USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, object_uuid, event_type, object_owner_uuid);

-- containers
CREATE INDEX containers_search_index ON public.containers USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, state, log, cwd, output_path, output, container_image, auth_uuid, locked_by_uuid);
CREATE INDEX index_containers_on_auth_uuid ON public.containers USING btree (auth_uuid);
CREATE INDEX index_containers_on_locked_by_uuid_and_priority ON public.containers USING btree (locked_by_uuid, priority);
CREATE INDEX index_containers_on_locked_by_uuid_and_uuid ON public.containers USING btree (locked_by_uuid, uuid);
CREATE INDEX index_containers_on_modified_at_uuid ON public.containers USING btree (modified_at DESC, uuid);
CREATE INDEX index_containers_on_owner_uuid ON public.containers USING btree (owner_uuid);
CREATE INDEX index_containers_on_queued_state ON public.containers USING btree (state, ((priority > 0)));
CREATE INDEX index_containers_on_reuse_columns ON public.containers USING btree (md5(command), cwd, md5(environment), output_path, container_image, md5(mounts), secret_mounts_md5, md5(runtime_constraints));
CREATE INDEX index_containers_on_runtime_status ON public.containers USING gin (runtime_status);
CREATE INDEX index_containers_on_secret_mounts_md5 ON public.containers USING btree (secret_mounts_md5);
CREATE UNIQUE INDEX index_containers_on_uuid ON public.containers USING btree (uuid);

-- pipeline_instances
CREATE INDEX index_pipeline_instances_on_created_at ON public.pipeline_instances USING btree (created_at);
CREATE INDEX index_pipeline_instances_on_modified_at ON public.pipeline_instances USING btree (modified_at);
CREATE INDEX index_pipeline_instances_on_modified_at_uuid ON public.pipeline_instances USING btree (modified_at DESC, uuid);
CREATE INDEX index_pipeline_instances_on_owner_uuid ON public.pipeline_instances USING btree (owner_uuid);
CREATE UNIQUE INDEX index_pipeline_instances_on_uuid ON public.pipeline_instances USING btree (uuid);
CREATE INDEX pipeline_instances_full_text_search_idx ON public.pipeline_instances USING gin (to_tsvector('english'::regconfig, substr((((((((((((((((((((((COALESCE(uuid, ''::character varying))::text || ' '::text) || (COALESCE(owner_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(modified_by_client_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(modified_by_user_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(pipeline_template_uuid, ''::character varying))::text) || ' '::text) || (COALESCE(name, ''::character varying))::text) || ' '::text) || COALESCE(components, ''::text)) || ' '::text) || COALESCE(properties, ''::text)) || ' '::text) || (COALESCE(state, ''::character varying))::text) || ' '::text) || COALESCE(components_summary, ''::text)) || ' '::text) || (COALESCE(description, ''::character varying))::text), 0, 1000000)));
CREATE INDEX pipeline_instances_search_index ON public.pipeline_instances USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, pipeline_template_uuid, name, state);

-- api_clients
CREATE INDEX api_clients_search_index ON public.api_clients USING btree (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, name, url_prefix);
CREATE INDEX index_api_clients_on_created_at ON public.api_clients USING btree (created_at);
CREATE INDEX index_api_clients_on_modified_at ON public.api_clients USING btree (modified_at);
CREATE INDEX index_api_clients_on_owner_uuid ON public.api_clients USING btree (owner_uuid);
CREATE UNIQUE INDEX index_api_clients_on_uuid ON public.api_clients USING btree (uuid);
